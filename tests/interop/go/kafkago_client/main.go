// Command kafkago_client drives a broker with segmentio/kafka-go 0.2.1 (Debian's
// golang-github-segmentio-kafka-go-dev, built in GOPATH mode) at the protocol versions that
// release hard-codes: CreateTopics v0, Produce v2 (message format v1), Fetch v2, ListOffsets v1,
// JoinGroup v1, OffsetCommit v2, OffsetFetch v1.
//
// It creates a two-partition topic, writes n records with known timestamps (round robin), reads
// the first quarter of each partition in a consumer group committing each record synchronously,
// closes the reader (leaving the group), starts a new reader of the same group and checks that it
// starts each partition at the committed offset and reads exactly the rest, then looks offsets up
// by timestamp. It prints one JSON summary line and exits 1 on any failure. With -codec gzip,
// snappy or lz4 and -chunk k, the records go k per WriteMessages call, compressed (message
// format v1 wrappers, inner offsets relative).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"

	kafka "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/gzip"
	"github.com/segmentio/kafka-go/lz4"
	"github.com/segmentio/kafka-go/snappy"
)

type summary struct {
	Client        string        `json:"client"`
	Codec         string        `json:"codec"`
	Topic         string        `json:"topic"`
	Produced      int           `json:"produced"`
	FirstRun      int           `json:"first_run"`
	SecondRun     int           `json:"second_run"`
	Committed     map[int]int64 `json:"committed"`
	ResumedAt     map[int]int64 `json:"resumed_at"`
	PerPartition  map[int]int   `json:"per_partition"`
	TimestampHits int           `json:"timestamp_hits"`
	PastEnd       map[int]int64 `json:"past_end"`
	OK            bool          `json:"ok"`
	Error         string        `json:"error,omitempty"`
}

func fail(s *summary, format string, args ...interface{}) {
	s.OK = false
	s.Error = fmt.Sprintf(format, args...)
	out, _ := json.Marshal(s)
	fmt.Println(string(out))
	os.Exit(1)
}

// The records' timestamps: whole milliseconds, one second apart, so that a lookup half a second
// before a record's timestamp must land on that record.
func stamp(base time.Time, i int) time.Time { return base.Add(time.Duration(i) * time.Second) }

func main() {
	broker := flag.String("broker", "127.0.0.1:9092", "bootstrap broker host:port")
	topic := flag.String("topic", "kafka-go", "topic to create")
	group := flag.String("group", "kafka-go-group", "consumer group")
	n := flag.Int("n", 40, "records to produce")
	codecName := flag.String("codec", "none", "the writer's compression: none, gzip, snappy or lz4")
	chunk := flag.Int("chunk", 1, "records per WriteMessages call")
	flag.Parse()
	// Importing a codec's package also registers it for reading compressed messages.
	codecs := map[string]kafka.CompressionCodec{"none": nil, "gzip": gzip.NewCompressionCodec(),
		"snappy": snappy.NewCompressionCodec(), "lz4": lz4.NewCompressionCodec()}
	codec, known := codecs[*codecName]
	s := &summary{Client: "kafka-go 0.2.1", Codec: *codecName, Topic: *topic, Committed: map[int]int64{},
		ResumedAt: map[int]int64{}, PerPartition: map[int]int{}, PastEnd: map[int]int64{}}
	if !known || *chunk < 1 {
		fail(s, "-codec %q or -chunk %d not supported", *codecName, *chunk)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A fixed client id: the broker's request log lines name it (the default is program@host).
	dialer := &kafka.Dialer{ClientID: "kafka-go-interop", Timeout: 10 * time.Second}
	conn, err := dialer.DialContext(ctx, "tcp", *broker)
	if err != nil {
		fail(s, "dial: %v", err)
	}
	if err := conn.CreateTopics(kafka.TopicConfig{Topic: *topic, NumPartitions: 2, ReplicationFactor: 1}); err != nil {
		fail(s, "create topics: %v", err)
	}
	conn.Close()

	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	writer := kafka.NewWriter(kafka.WriterConfig{Brokers: []string{*broker}, Topic: *topic, Dialer: dialer,
		Balancer: &kafka.RoundRobin{}, BatchTimeout: 10 * time.Millisecond, CompressionCodec: codec})
	// With a codec, each partition's share of a call is one compressed wrapper message.
	for start := 0; start < *n; start += *chunk {
		var msgs []kafka.Message
		for i := start; i < start+*chunk && i < *n; i++ {
			msgs = append(msgs, kafka.Message{Key: []byte("k" + strconv.Itoa(i)),
				Value: []byte(strconv.Itoa(i)), Time: stamp(base, i)})
		}
		if err := writer.WriteMessages(ctx, msgs...); err != nil {
			fail(s, "write records %d-%d: %v", start, start+len(msgs)-1, err)
		}
		s.Produced += len(msgs)
	}
	writer.Close()

	seen := map[int]kafka.Message{}
	// One reader of the group: takes at most limit more records of each partition (committing
	// each one at once) until it holds want records in all, notes the first offset it gets from
	// each partition, then leaves the group. Records past a partition's limit are not committed.
	read := func(limit, want int, first map[int]int64) {
		reader := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{*broker}, GroupID: *group,
			Topic: *topic, Dialer: dialer, MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond,
			HeartbeatInterval: time.Second,
			// Close does not leave the group in 0.2.1: the next reader's JoinGroup waits for this
			// member's session to expire, so the shortest one Kafka accepts (group.min.session.timeout.ms).
			SessionTimeout: 6 * time.Second})
		taken := map[int]int{}
		for len(seen) < want {
			msg, err := reader.FetchMessage(ctx)
			if err != nil {
				fail(s, "fetch after %d records: %v", len(seen), err)
			}
			if _, ok := first[msg.Partition]; !ok {
				first[msg.Partition] = msg.Offset
			}
			if taken[msg.Partition] == limit {
				continue
			}
			i, err := strconv.Atoi(string(msg.Value))
			if err != nil || string(msg.Key) != "k"+string(msg.Value) {
				fail(s, "unexpected record %q=%q", msg.Key, msg.Value)
			}
			if _, dup := seen[i]; dup {
				fail(s, "record %d read twice (partition %d offset %d)", i, msg.Partition, msg.Offset)
			}
			if !msg.Time.Equal(stamp(base, i)) {
				fail(s, "record %d has timestamp %v, written with %v", i, msg.Time, stamp(base, i))
			}
			seen[i] = msg
			taken[msg.Partition]++
			if err := reader.CommitMessages(ctx, msg); err != nil {
				fail(s, "commit offset %d of partition %d: %v", msg.Offset, msg.Partition, err)
			}
			s.Committed[msg.Partition] = msg.Offset + 1
		}
		if err := reader.Close(); err != nil {
			fail(s, "close reader: %v", err)
		}
	}
	read(*n/4, 2*(*n/4), map[int]int64{})
	s.FirstRun = len(seen)
	committed := map[int]int64{}
	for p, o := range s.Committed {
		committed[p] = o
	}
	read(*n, *n, s.ResumedAt)
	s.SecondRun = len(seen) - s.FirstRun
	// The second reader starts each partition where the first one's commits left it.
	if len(committed) != 2 || len(s.ResumedAt) != 2 {
		fail(s, "committed in %d partitions, resumed in %d: want 2", len(committed), len(s.ResumedAt))
	}
	for p, o := range s.ResumedAt {
		if o != committed[p] {
			fail(s, "partition %d resumed at offset %d, committed %d", p, o, committed[p])
		}
	}

	// ListOffsets v1 by timestamp, on the partition's leader.
	indexes := make([]int, 0, len(seen))
	for i := range seen {
		indexes = append(indexes, i)
	}
	sort.Ints(indexes)
	for _, p := range []int{0, 1} {
		leader, err := dialer.DialLeader(ctx, "tcp", *broker, *topic, p)
		if err != nil {
			fail(s, "dial leader of %d: %v", p, err)
		}
		for _, i := range indexes {
			msg := seen[i]
			if msg.Partition != p {
				continue
			}
			s.PerPartition[p]++
			for _, at := range []time.Time{msg.Time, msg.Time.Add(-500 * time.Millisecond)} {
				offset, err := leader.ReadOffset(at)
				if err != nil {
					fail(s, "offset for time %v in partition %d: %v", at, p, err)
				}
				if offset != msg.Offset {
					fail(s, "offset for time %v in partition %d: %d, want %d", at, p, offset, msg.Offset)
				}
				s.TimestampHits++
			}
		}
		// Past the newest timestamp Kafka answers offset -1.
		past, err := leader.ReadOffset(stamp(base, *n+10))
		if err != nil {
			fail(s, "offset past the end of partition %d: %v", p, err)
		}
		s.PastEnd[p] = past
		first, last, err := leader.ReadOffsets()
		if err != nil || first != 0 || last != int64(s.PerPartition[p]) {
			fail(s, "partition %d offsets %d..%d (%v), want 0..%d", p, first, last, err, s.PerPartition[p])
		}
		leader.Close()
	}
	s.OK = true
	out, _ := json.Marshal(s)
	fmt.Println(string(out))
}
