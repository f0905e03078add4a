"""Benchmarks of trio_broker: start-up, idle-connection memory, small requests, throughput.

Run with ``python -m bench`` (or ``nox -s bench``). Every figure is reported next to a baseline
measured in the same run on the same machine, because absolute numbers on a shared 2-core machine
are noise; the ratios are what the targets of BRIEF §7 are about. See docs/benchmarks.md.
"""
