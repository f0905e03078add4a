// Command sarama_client drives a broker with Shopify/sarama 1.22 (Debian's
// golang-github-shopify-sarama-dev, built in GOPATH mode) in two phases, printing one JSON
// summary line and exiting 1 on any failure. -codec gzip or snappy compresses what both phases
// produce, -chunk k records per produce request (one wrapper message per partition and request:
// message format v0 in the first phase, v1 in the second).
//
// "legacy" keeps sarama's default Version (V0_8_2_0): Metadata v0 (the topic is auto-created),
// Produce v0 (message format v0), Fetch v0, ListOffsets v0, FindCoordinator v0, OffsetFetch v1 and
// OffsetCommit v1 through an OffsetManager, which is how that version keeps a group's position
// (sarama's ConsumerGroup needs V0_10_2_0). It reads half of the records, commits, closes, starts
// again and checks that it resumes at the commit. -legacy-version 0.9.0.0 makes it Fetch v1,
// 0.10.0.0 Metadata v1, Produce v2 (message format v1) and Fetch v2 (ListOffsets stays v0 below
// 0.10.1.0).
//
// "group" sets V0_10_2_0, the lowest version sarama's ConsumerGroup accepts: CreateTopics v0,
// Produce v2 (message format v1, with timestamps), Fetch v3, ListOffsets v1, JoinGroup v1,
// SyncGroup/Heartbeat/LeaveGroup v0, OffsetCommit v1. A consumer group reads the first quarter of
// each of two partitions (n/2 records each) and is closed; a new one must start each partition at
// its committed offset and read exactly the rest; then offsets are looked up by timestamp.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

type legacySummary struct {
	Version   string `json:"version"`
	Topic     string `json:"topic"`
	Produced  int    `json:"produced"`
	FirstRun  int    `json:"first_run"`
	Committed int64  `json:"committed"`
	ResumedAt int64  `json:"resumed_at"`
	SecondRun int    `json:"second_run"`
	Oldest    int64  `json:"oldest"`
	Newest    int64  `json:"newest"`
	// ListOffsets v0 by time: an hour ahead, an hour back (no segment that old: no offset).
	HourAhead    int64 `json:"hour_ahead"`
	HourBackNone bool  `json:"hour_back_none"`
}

type groupSummary struct {
	Topic         string          `json:"topic"`
	Produced      int             `json:"produced"`
	FirstRun      int             `json:"first_run"`
	Committed     map[int32]int64 `json:"committed"`
	ResumedAt     map[int32]int64 `json:"resumed_at"`
	SecondRun     int             `json:"second_run"`
	TimestampHits int             `json:"timestamp_hits"`
	PastEnd       map[int32]int64 `json:"past_end"`
}

type summary struct {
	Client string        `json:"client"`
	Codec  string        `json:"codec"`
	Legacy legacySummary `json:"legacy"`
	Group  groupSummary  `json:"group"`
	OK     bool          `json:"ok"`
	Error  string        `json:"error,omitempty"`
}

var result = summary{Client: "sarama 1.22"}

// The producers' compression (-codec) and how many records go in one produce request (-chunk):
// with a codec, each partition's share of a request is one compressed wrapper message.
var (
	codec = sarama.CompressionNone
	chunk = 1
)

// send produces msgs, chunk records per request; sarama fills in each one's partition and offset.
func send(producer sarama.SyncProducer, msgs []*sarama.ProducerMessage, what string) {
	for start := 0; start < len(msgs); start += chunk {
		end := start + chunk
		if end > len(msgs) {
			end = len(msgs)
		}
		check(producer.SendMessages(msgs[start:end]), fmt.Sprintf("%s: produce records %d-%d", what, start, end-1))
	}
}

func fail(format string, args ...interface{}) {
	result.OK = false
	result.Error = fmt.Sprintf(format, args...)
	out, _ := json.Marshal(result)
	fmt.Println(string(out))
	os.Exit(1)
}

func check(err error, what string) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

// The records' timestamps: whole milliseconds, one second apart, so that a lookup half a second
// before a record's timestamp must land on that record.
func stamp(base time.Time, i int) time.Time { return base.Add(time.Duration(i) * time.Second) }

func record(topic string, i int, ts time.Time) *sarama.ProducerMessage {
	return &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("k" + strconv.Itoa(i)),
		Value: sarama.StringEncoder(strconv.Itoa(i)), Timestamp: ts}
}

// index checks a consumed record's key against its value and returns the value.
func index(msg *sarama.ConsumerMessage) int {
	i, err := strconv.Atoi(string(msg.Value))
	if err != nil || string(msg.Key) != "k"+string(msg.Value) {
		fail("unexpected record %q=%q at %s/%d/%d", msg.Key, msg.Value, msg.Topic, msg.Partition, msg.Offset)
	}
	return i
}

func config(version sarama.KafkaVersion, id string) *sarama.Config {
	cfg := sarama.NewConfig()
	if version != (sarama.KafkaVersion{}) {
		cfg.Version = version
	}
	cfg.ClientID = id
	cfg.Producer.Return.Successes = true
	cfg.Producer.Compression = codec
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Metadata.Retry.Max = 10
	cfg.Metadata.Retry.Backoff = 200 * time.Millisecond
	return cfg
}

// legacy: sarama's defaults throughout.
func legacy(brokers []string, topic, group string, n int, version string) {
	s := &result.Legacy
	s.Topic = topic
	cfg := config(sarama.KafkaVersion{}, "sarama-legacy")
	if cfg.Version != sarama.V0_8_2_0 {
		fail("sarama's default version is %s, expected 0.8.2.0", cfg.Version)
	}
	if version != "default" {
		parsed, err := sarama.ParseKafkaVersion(version)
		check(err, "-legacy-version")
		cfg.Version = parsed
	}
	s.Version = cfg.Version.String()
	producer, err := sarama.NewSyncProducer(brokers, cfg)
	check(err, "legacy producer")
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		msgs[i] = record(topic, i, time.Time{})
	}
	send(producer, msgs, "legacy")
	for i, msg := range msgs {
		if msg.Partition != 0 || msg.Offset != int64(i) {
			fail("legacy record %d stored at %d/%d, want 0/%d", i, msg.Partition, msg.Offset, i)
		}
		s.Produced++
	}
	check(producer.Close(), "legacy producer close")

	// One pass: the OffsetManager's position (the committed offset, or OffsetOldest while the
	// group has none), the records from there, a commit after each; returns that position.
	run := func(count int) (start int64) {
		client, err := sarama.NewClient(brokers, cfg)
		check(err, "legacy client")
		offsets, err := sarama.NewOffsetManagerFromClient(group, client)
		check(err, "legacy offset manager")
		pom, err := offsets.ManagePartition(topic, 0)
		check(err, "legacy manage partition")
		start, _ = pom.NextOffset()
		consumer, err := sarama.NewConsumerFromClient(client)
		check(err, "legacy consumer")
		pc, err := consumer.ConsumePartition(topic, 0, start)
		check(err, fmt.Sprintf("legacy consume from %d", start))
		timeout := time.After(20 * time.Second)
		for got := 0; got < count; got++ {
			select {
			case msg := <-pc.Messages():
				if i := index(msg); int64(i) != msg.Offset || (got == 0 && start >= 0 && msg.Offset != start) {
					fail("legacy record %d at offset %d, read from %d", i, msg.Offset, start)
				}
				pom.MarkOffset(msg.Offset+1, "")
			case err := <-pc.Errors():
				fail("legacy consume: %v", err)
			case <-timeout:
				fail("legacy consumer: %d of %d records after 20 s", got, count)
			}
		}
		check(pc.Close(), "legacy partition consumer close")
		check(pom.Close(), "legacy partition offset manager close")
		check(offsets.Close(), "legacy offset manager close") // the last commit is flushed here
		check(consumer.Close(), "legacy consumer close")
		check(client.Close(), "legacy client close")
		return start
	}
	half := n / 2
	if start := run(half); start != sarama.OffsetOldest {
		fail("legacy: a new group starts at %d, want OffsetOldest (no commit yet)", start)
	}
	s.FirstRun = half
	s.Committed = int64(half)
	s.ResumedAt = run(n - half)
	s.SecondRun = n - half
	if s.ResumedAt != s.Committed {
		fail("legacy: restarted at %d, committed %d", s.ResumedAt, s.Committed)
	}

	client, err := sarama.NewClient(brokers, cfg)
	check(err, "legacy client")
	s.Oldest, err = client.GetOffset(topic, 0, sarama.OffsetOldest)
	check(err, "legacy oldest offset")
	s.Newest, err = client.GetOffset(topic, 0, sarama.OffsetNewest)
	check(err, "legacy newest offset")
	// Version 0 answers by segment (Kafka's legacyFetchOffsetsBefore): the newest segment's base
	// offset (or the log end, stamped now) among those last modified at or before the time.
	hour := int64(time.Hour / time.Millisecond)
	now := time.Now().UnixNano() / int64(time.Millisecond)
	s.HourAhead, err = client.GetOffset(topic, 0, now+hour)
	check(err, "legacy offset an hour ahead")
	_, err = client.GetOffset(topic, 0, now-hour)
	s.HourBackNone = err == sarama.ErrOffsetOutOfRange // sarama's word for an empty offsets array
	check(client.Close(), "legacy client close")
	if s.Oldest != 0 || s.Newest != int64(n) || s.HourAhead != int64(n) || !s.HourBackNone {
		fail("legacy offsets %d..%d, want 0..%d; an hour ahead %d, want %d; an hour back: %v",
			s.Oldest, s.Newest, n, s.HourAhead, n, err)
	}
}

type placed struct {
	partition int32
	offset    int64
}

// handler reads up to limit records of each partition in a consumer group and marks each one
// it takes; it leaves the rest unmarked.
type handler struct {
	mu    sync.Mutex
	limit int
	got   map[int32]int
	total int
	seen  map[int]placed
	first map[int32]int64
	base  time.Time
	done  chan struct{}
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *handler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		h.mu.Lock()
		if h.got[msg.Partition] < h.limit {
			i := index(msg)
			if old, dup := h.seen[i]; dup {
				fail("group: record %d read twice (%d/%d, then %d/%d)", i, old.partition, old.offset, msg.Partition, msg.Offset)
			}
			if !msg.Timestamp.Equal(stamp(h.base, i)) {
				fail("group: record %d has timestamp %v, written with %v", i, msg.Timestamp, stamp(h.base, i))
			}
			h.seen[i] = placed{msg.Partition, msg.Offset}
			if _, ok := h.first[msg.Partition]; !ok {
				h.first[msg.Partition] = msg.Offset
			}
			sess.MarkMessage(msg, "")
			h.got[msg.Partition]++
			if h.total++; h.total == 2*h.limit {
				close(h.done)
			}
		}
		h.mu.Unlock()
	}
	return nil
}

// consume runs a consumer group until the handler has its records, then closes it (the session's
// end commits the marked offsets; Close leaves the group).
func consume(brokers []string, cfg *sarama.Config, topic, group string, h *handler) {
	cg, err := sarama.NewConsumerGroup(brokers, group, cfg)
	check(err, "consumer group")
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, h); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	select {
	case <-h.done:
	case err := <-errs:
		fail("consumer group stopped: %v", err)
	case <-time.After(30 * time.Second):
		fail("consumer group: %d of %d records after 30 s", h.total, 2*h.limit)
	}
	cancel()
	check(<-errs, "consumer group")
	check(cg.Close(), "consumer group close")
}

// grouped: V0_10_2_0, timestamps, a consumer group and lookups by time.
func grouped(brokers []string, topic, group string, n int) {
	s := &result.Group
	s.Topic = topic
	s.Committed, s.ResumedAt, s.PastEnd = map[int32]int64{}, map[int32]int64{}, map[int32]int64{}
	cfg := config(sarama.V0_10_2_0, "sarama-group")
	cfg.Consumer.Offsets.CommitInterval = 100 * time.Millisecond
	cfg.Producer.Partitioner = sarama.NewManualPartitioner

	admin, err := sarama.NewClusterAdmin(brokers, cfg)
	check(err, "cluster admin")
	check(admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1}, false), "create topic")
	check(admin.Close(), "cluster admin close")

	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	producer, err := sarama.NewSyncProducer(brokers, cfg)
	check(err, "group producer")
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		msgs[i] = record(topic, i, stamp(base, i))
		msgs[i].Partition = int32(i % 2) // each partition gets n/2 records, in order
	}
	send(producer, msgs, "group")
	where := map[int]placed{}
	for i, msg := range msgs {
		if msg.Partition != int32(i%2) || msg.Offset != int64(i/2) {
			fail("group record %d stored at %d/%d, want %d/%d", i, msg.Partition, msg.Offset, i%2, i/2)
		}
		where[i] = placed{msg.Partition, msg.Offset}
		s.Produced++
	}
	check(producer.Close(), "group producer close")

	seen := map[int]placed{}
	first := &handler{limit: n / 4, got: map[int32]int{}, seen: seen, first: map[int32]int64{}, base: base, done: make(chan struct{})}
	consume(brokers, cfg, topic, group, first)
	s.FirstRun = first.total

	client, err := sarama.NewClient(brokers, cfg)
	check(err, "group client")
	// The group's commits as OffsetFetch reports them, against what the first run took.
	offsets, err := sarama.NewOffsetManagerFromClient(group, client)
	check(err, "offset manager")
	for _, p := range []int32{0, 1} {
		pom, err := offsets.ManagePartition(topic, p)
		check(err, "manage partition")
		s.Committed[p], _ = pom.NextOffset()
		want := int64(sarama.OffsetOldest)
		for _, at := range seen {
			if at.partition == p && at.offset+1 > want {
				want = at.offset + 1
			}
		}
		if s.Committed[p] != want {
			fail("group: partition %d committed %d, first run read up to %d", p, s.Committed[p], want)
		}
		check(pom.Close(), "partition offset manager close")
	}
	check(offsets.Close(), "offset manager close")

	second := &handler{limit: n/2 - n/4, got: map[int32]int{}, seen: seen, first: s.ResumedAt, base: base, done: make(chan struct{})}
	consume(brokers, cfg, topic, group, second)
	s.SecondRun = second.total
	for i, at := range where {
		if seen[i] != at {
			fail("group: record %d read at %v, produced at %v", i, seen[i], at)
		}
	}
	for p, start := range s.ResumedAt {
		want := s.Committed[p]
		if want == sarama.OffsetOldest {
			want = 0
		}
		if start != want {
			fail("group: partition %d resumed at %d, committed %d", p, start, s.Committed[p])
		}
	}

	// ListOffsets v1: the first offset whose timestamp is at or after the one asked for.
	for i, at := range where {
		for _, ts := range []time.Time{stamp(base, i), stamp(base, i).Add(-500 * time.Millisecond)} {
			offset, err := client.GetOffset(topic, at.partition, ts.UnixNano()/int64(time.Millisecond))
			check(err, "offset for time")
			if offset != at.offset {
				fail("group: offset for time %v in partition %d is %d, want %d", ts, at.partition, offset, at.offset)
			}
			s.TimestampHits++
		}
	}
	for _, p := range []int32{0, 1} {
		s.PastEnd[p], err = client.GetOffset(topic, p, stamp(base, n+10).UnixNano()/int64(time.Millisecond))
		check(err, "offset past the end")
	}
	check(client.Close(), "group client close")
}

func main() {
	broker := flag.String("broker", "127.0.0.1:9092", "bootstrap broker host:port")
	prefix := flag.String("prefix", "sarama", "prefix of the topics and groups")
	n := flag.Int("n", 40, "records to produce in each phase")
	codecName := flag.String("codec", "none", "producers' compression: none, gzip or snappy")
	flag.IntVar(&chunk, "chunk", 1, "records per produce request")
	legacyVersion := flag.String("legacy-version", "default",
		"the legacy phase's Version: default (sarama's, 0.8.2.0) or one below 0.10.1.0")
	flag.Parse()
	codecs := map[string]sarama.CompressionCodec{"none": sarama.CompressionNone,
		"gzip": sarama.CompressionGZIP, "snappy": sarama.CompressionSnappy}
	var known bool
	if codec, known = codecs[*codecName]; !known || chunk < 1 {
		fail("-codec %q or -chunk %d not supported", *codecName, chunk)
	}
	result.Codec = *codecName
	sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Lmicroseconds)
	// Within the test's own time limit, so that a hang still prints how far it got.
	time.AfterFunc(80*time.Second, func() { fail("not done after 80 s") })
	brokers := []string{*broker}
	legacy(brokers, *prefix+"-legacy", *prefix+"-legacy-group", *n, *legacyVersion)
	grouped(brokers, *prefix+"-group", *prefix+"-group-group", *n)
	result.OK = true
	out, _ := json.Marshal(result)
	fmt.Println(string(out))
}
