"""dcgm-exporter activity: parser properties and a real HTTP server on loopback."""

import logging
import socket
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustats.sources import dcgm
from gpustats.sources.dcgm import DcgmExporterClient, parse_dcgm_activity
from tests.support.clock import Clock
from tests.support.dcgm_exporter import GOOD, Exporter


def test_parse_primary_then_fallback():
    assert parse_dcgm_activity(GOOD) == {("GPU-a", 7): 0.6, ("GPU-a", 8): 0.2,
                                         ("GPU-b", None): 0.5}


def test_parse_labels_and_values_from_any_exporter_release():
    text = """DCGM_FI_PROF_GR_ENGINE_ACTIVE{uuid="GPU-old",GPU_I_ID="3"} 1.7
DCGM_FI_PROF_GR_ENGINE_ACTIVE{UUID="GPU-a",GPU_I_ID=""} -0.1
DCGM_FI_PROF_GR_ENGINE_ACTIVE{UUID="GPU-a",GPU_I_ID="x1"} 0.5
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="3",GPU_I_ID="1"} 0.5
DCGM_FI_PROF_GR_ENGINE_ACTIVE{UUID="GPU-c",GPU_I_ID="2"} +Inf
DCGM_FI_PROF_GR_ENGINE_ACTIVE_EXTRA{UUID="GPU-c",GPU_I_ID="2"} 0.3
"""
    assert parse_dcgm_activity(text) == {("GPU-old", 3): 1.0, ("GPU-a", None): 0.0}


def test_other_families_are_not_parsed():
    # A line the parser would reject, in a family we do not read, costs nothing.
    assert parse_dcgm_activity(GOOD + "DCGM_FI_DEV_FB_USED{{{ broken\n") == \
        parse_dcgm_activity(GOOD)


def test_parse_garbage_raises_value_error():
    with pytest.raises(ValueError):
        parse_dcgm_activity("DCGM_FI_PROF_GR_ENGINE_ACTIVE{UUID=\"x\" 0.5\n{{{{ garbage")


label_st = st.sampled_from(["UUID", "uuid", "GPU_I_ID", "gpu", "x"])
line_st = st.builds(
    lambda name, labels, value: f"{name}{{{labels}}} {value}",
    st.sampled_from(["DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "OTHER"]),
    st.lists(st.builds(lambda k, v: f'{k}="{v}"', label_st, st.text(max_size=6)),
             max_size=3).map(",".join),
    st.one_of(st.floats().map(repr), st.text(max_size=5)))


@settings(max_examples=300)
@given(st.one_of(st.text(), st.lists(st.one_of(line_st, st.text(max_size=20))).map("\n".join)))
def test_parser_never_raises_other_than_value_error(text):
    try:
        result = parse_dcgm_activity(text)
    except ValueError:
        return
    assert all(0.0 <= v <= 1.0 for v in result.values())
    assert all(gi is None or gi >= 0 for _, gi in result)


@pytest.fixture
def exporter():
    e = Exporter()
    yield e
    e.close()


@pytest.fixture
def keep_alive_exporter():
    e = Exporter(keep_alive=True)
    yield e
    e.close()


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_fetch_and_cache(exporter):
    clock = Clock()
    client = DcgmExporterClient(exporter.url, cache_seconds=2.0, clock=clock)
    assert client.activity() == parse_dcgm_activity(GOOD)
    clock.now += 1.9
    client.activity()
    assert exporter.requests == 1
    clock.now += 0.2
    client.activity()
    assert exporter.requests == 2


def test_garbage_gives_none_and_one_line(exporter, caplog):
    exporter.body = b'DCGM_FI_PROF_GR_ENGINE_ACTIVE{UUID="GPU-a" 0.5 {{{\n'
    client = DcgmExporterClient(exporter.url, cache_seconds=0, failure_backoff_seconds=0)
    with caplog.at_level(logging.WARNING):
        assert client.activity() is None
        assert client.activity() is None
    assert exporter.requests == 2
    assert len([r for r in caplog.records if "garbage" in r.getMessage()]) == 1


def test_a_page_that_is_not_prometheus_text_is_garbage():
    for body in ["\x00\x01 this is not prometheus {{{", "<html><body>login</body></html>"]:
        with pytest.raises(ValueError):
            parse_dcgm_activity(body)


def test_no_activity_series_is_an_empty_answer_logged_once(exporter, caplog):
    exporter.body = b"# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{UUID=\"GPU-a\"} 4\n"
    client = DcgmExporterClient(exporter.url, cache_seconds=0)
    with caplog.at_level(logging.WARNING):
        assert client.activity() == {}
        assert client.activity() == {}
    assert len([r for r in caplog.records if "serves neither" in r.getMessage()]) == 1


def test_slow_exporter_gives_none(exporter, caplog):
    exporter.delay = 1.0
    client = DcgmExporterClient(exporter.url, cache_seconds=0, timeout_seconds=0.2)
    with caplog.at_level(logging.WARNING):
        assert client.activity() is None
    assert "did not answer" in caplog.text


def test_down_exporter_gives_none_and_one_line_and_backs_off(caplog):
    clock = Clock()
    down = DcgmExporterClient(f"http://127.0.0.1:{closed_port()}/metrics", cache_seconds=0,
                              timeout_seconds=0.3, failure_backoff_seconds=10, clock=clock)
    with caplog.at_level(logging.WARNING):
        assert down.activity() is None
        clock.now += 5
        assert down.activity() is None        # within the back-off: not asked again
        assert down.requests == 1
        clock.now += 6
        assert down.activity() is None
        assert down.requests == 2
    assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 1


def test_http_error_is_a_failure(exporter):
    exporter.status = 500
    client = DcgmExporterClient(exporter.url)
    assert client.activity() is None


def test_single_flight(exporter):
    exporter.delay = 0.3
    client = DcgmExporterClient(exporter.url, cache_seconds=0.0)
    threads = [threading.Thread(target=client.activity) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert exporter.requests == 1


def test_dripping_exporter_is_cut_off_at_the_total_deadline(exporter, caplog):
    # One byte every 0.1 s: ~50 s for the body. A per-chunk timeout never fires on that.
    exporter.drip_seconds = 0.1
    client = DcgmExporterClient(exporter.url, cache_seconds=0, timeout_seconds=0.5)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert client.activity() is None
    assert time.monotonic() - started < 3.0          # the deadline, not the body's pace
    assert "did not answer within 0.5 s" in caplog.text


def test_failures_count_and_mark_the_source(exporter):
    from gpustats.sources.errors import CollectionErrors
    errors = CollectionErrors()
    exporter.status = 500
    client = DcgmExporterClient(exporter.url, cache_seconds=0, failure_backoff_seconds=0,
                                errors=errors)
    assert client.activity() is None
    (state,) = errors.states()
    assert state.source == "dcgm_exporter" and state.state == "failing"
    assert state.last_error_reason == "down" and "HTTP 500" in state.last_error
    assert errors.totals() == (("dcgm_exporter", "down", 1),)
    exporter.status = 200
    assert client.activity() == parse_dcgm_activity(GOOD)
    (state,) = errors.states()
    assert state.state == "ok" and state.last_success_time is not None


def test_an_endless_body_is_cut_off_past_the_cap(exporter, caplog, monkeypatch):
    monkeypatch.setattr(dcgm, "MAX_BODY_BYTES", 1 << 20)
    exporter.endless = True
    client = DcgmExporterClient(exporter.url, cache_seconds=0, timeout_seconds=5.0)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert client.activity() is None
    assert time.monotonic() - started < 4.0          # stopped at the cap, not at the deadline
    assert "answered garbage (body larger than 1048576 bytes)" in caplog.text
    # The client stopped reading: what the server got out is the cap plus what the socket
    # buffers held, nowhere near the 5 s of loopback throughput it would be otherwise.
    assert exporter.sent < 64 * (1 << 20)


def test_a_redirect_is_refused_not_followed(exporter, caplog):
    exporter.status = 302
    exporter.location = "http://127.0.0.1:1/elsewhere"
    exporter.body = b""
    client = DcgmExporterClient(exporter.url, cache_seconds=0)
    with caplog.at_level(logging.WARNING):
        assert client.activity() is None
    assert exporter.requests == 1
    assert "unreachable (HTTP 302 redirect to 'http://127.0.0.1:1/elsewhere' not followed)" \
        in caplog.text


def test_one_connection_is_kept_alive_across_scrapes(keep_alive_exporter):
    client = DcgmExporterClient(keep_alive_exporter.url, cache_seconds=0)
    for _ in range(3):
        assert client.activity() == parse_dcgm_activity(GOOD)
    assert keep_alive_exporter.requests == 3
    assert len(keep_alive_exporter.peers) == 1
    client.close()


def test_proxy_variables_are_not_followed(exporter, monkeypatch):
    # The exporter is the node's own: a cluster-wide HTTP proxy must not be asked for it.
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    client = DcgmExporterClient(exporter.url, cache_seconds=0)
    assert client.activity() == parse_dcgm_activity(GOOD)


def test_a_chunked_body_is_read_whole_and_the_connection_kept(keep_alive_exporter):
    keep_alive_exporter.chunked = True
    keep_alive_exporter.body = GOOD.encode() + b"# filler\n" * 5000
    client = DcgmExporterClient(keep_alive_exporter.url, cache_seconds=0)
    assert client.activity() == parse_dcgm_activity(GOOD)
    assert client.activity() == parse_dcgm_activity(GOOD)
    assert len(keep_alive_exporter.peers) == 1
    client.close()


def test_a_slow_connect_and_slow_headers_share_one_deadline(exporter, caplog, monkeypatch):
    import urllib3.util.connection as connection
    real = connection.create_connection

    def slow_connect(*args, **kwargs):
        time.sleep(1.0)                       # measures: a slow connect
        return real(*args, **kwargs)

    monkeypatch.setattr(connection, "create_connection", slow_connect)
    exporter.delay = 3.0
    client = DcgmExporterClient(exporter.url, cache_seconds=0, timeout_seconds=1.2)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert client.activity() is None
    # 1.2 s in all; waiting 1.2 s for the headers after a 1 s connect would be 2.2 s.
    assert time.monotonic() - started < 1.9
    assert "did not answer within 1.2 s" in caplog.text


# ------------------------------------------------------------------ bounds on one scrape

def activity_lines(count: int, family: str = dcgm.PRIMARY) -> str:
    """``count`` activity series, each with labels of its own."""
    return "".join(f'{family}{{UUID="GPU-{n}",GPU_I_ID="{n % 7 + 7}",pod="p{n}"}} 0.5\n'
                   for n in range(count))


class TickingClock:
    """A CPU clock that moves ``step`` seconds each time it is read."""

    def __init__(self, step: float):
        self.step = step
        self.now = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        self.now += self.step
        return self.now


def test_series_up_to_the_cap_are_read_one_more_is_refused():
    assert len(parse_dcgm_activity(activity_lines(10), max_series=10)) == 10
    with pytest.raises(dcgm.TooManySeries, match="more than 10 activity series"):
        parse_dcgm_activity(activity_lines(11), max_series=10)


def test_the_cap_counts_both_families_and_not_the_others():
    text = activity_lines(6) + activity_lines(6, dcgm.FALLBACK)
    with pytest.raises(dcgm.TooManySeries):
        parse_dcgm_activity(text, max_series=10)
    assert len(parse_dcgm_activity(activity_lines(10) + activity_lines(5000, "DCGM_FI_DEV_X"),
                                   max_series=10)) == 10


def test_the_cap_stops_the_parse_before_the_rest_of_the_body(monkeypatch):
    parsed = []
    real = dcgm._parse
    monkeypatch.setattr(dcgm, "_parse", lambda text: parsed.append(text) or real(text))
    parser = dcgm.ActivityParser(max_series=100)
    pieces = [activity_lines(60).encode()] * 10
    with pytest.raises(dcgm.TooManySeries):
        for piece in pieces:
            parser.feed(piece)
    assert len(parsed) == 1               # the second piece went past the cap unparsed


def test_the_cpu_deadline_is_checked_after_every_piece():
    clock = TickingClock(0.1)
    parser = dcgm.ActivityParser(cpu_seconds=0.35, cpu_clock=clock)     # read once: 0.1
    fed = 0
    with pytest.raises(dcgm.CpuDeadline, match="more than 0.35 s of CPU"):
        for _ in range(100):
            parser.feed(b"# filler\n" * 1000)
            fed += 1
    assert fed == 3                       # 0.2, 0.3, 0.4: the fourth piece was the last


def test_a_clock_that_stands_still_never_reaches_the_deadline():
    text = activity_lines(1000) + "# filler\n" * 100_000
    assert len(parse_dcgm_activity(text, cpu_seconds=0.0, cpu_clock=lambda: 5.0)) == 1000


def test_a_tiny_budget_stops_a_body_of_any_family():
    with pytest.raises(dcgm.CpuDeadline):
        parse_dcgm_activity(activity_lines(10, "DCGM_FI_DEV_X"), cpu_seconds=-1.0)


def test_only_the_activity_lines_reach_the_parser(monkeypatch):
    parsed = []
    real = dcgm._parse
    monkeypatch.setattr(dcgm, "_parse", lambda text: parsed.append(text) or real(text))
    text = GOOD + "DCGM_FI_PROF_GR_ENGINE_ACTIVE_EXTRA{UUID=\"GPU-a\"} 0.3\n" \
        + "  DCGM_FI_PROF_SM_ACTIVE\t{UUID=\"GPU-c\"} 0.1\n"
    assert parse_dcgm_activity(text)[("GPU-c", None)] == 0.1
    lines = "".join(parsed).splitlines()
    assert lines and all(line.lstrip().startswith((dcgm.PRIMARY + "{", dcgm.FALLBACK))
                         for line in lines)
    assert not any("_EXTRA" in line or "#" in line or "GPU_UTIL" in line for line in lines)


@settings(max_examples=100)
@given(st.lists(st.integers(min_value=1, max_value=400), max_size=30))
def test_pieces_cut_anywhere_parse_as_the_whole(cuts):
    body = (GOOD + activity_lines(20)).encode()
    parser = dcgm.ActivityParser()
    start = 0
    for size in cuts:
        parser.feed(body[start:start + size])
        start += size
    parser.feed(body[start:])
    assert parser.close() == parse_dcgm_activity(body.decode())


def test_a_line_too_long_is_garbage_kept_or_carried():
    long_value = "x" * dcgm.MAX_LINE_BYTES
    with pytest.raises(ValueError, match="line longer than"):
        parse_dcgm_activity(f'{dcgm.PRIMARY}{{UUID="{long_value}"}} 0.5\n')
    parser = dcgm.ActivityParser()
    parser.feed(b"# HELP " + b"x" * (dcgm.MAX_LINE_BYTES - 7))      # at the cap: carried
    with pytest.raises(ValueError, match="line longer than"):
        parser.feed(b"x")


def test_garbage_is_still_told_from_a_page_without_activity_series():
    assert parse_dcgm_activity("\n\n# TYPE X gauge\nX 1\n" + "Y{a=\"b\"} 2\n" * 100) == {}
    with pytest.raises(ValueError):
        parse_dcgm_activity("\n" * 70_000 + "<html><body>login</body></html>\n")


def failing_state(errors):
    (state,) = errors.states()
    assert state.source == "dcgm_exporter" and state.state == "failing"
    return state


def test_too_many_series_marks_the_source_failing_and_logs_it(exporter, caplog):
    from gpustats.sources.errors import CollectionErrors
    errors = CollectionErrors()
    exporter.body = activity_lines(dcgm.MAX_SERIES + 1).encode()
    client = DcgmExporterClient(exporter.url, cache_seconds=0, failure_backoff_seconds=0,
                                errors=errors)
    with caplog.at_level(logging.WARNING):
        assert client.activity() is None
    state = failing_state(errors)
    assert state.last_error_reason == "too_many_series"
    assert f"more than {dcgm.MAX_SERIES} activity series" in state.last_error
    assert errors.totals() == (("dcgm_exporter", "too_many_series", 1),)
    assert "dcgm_exporter failing (too_many_series)" in caplog.text
    exporter.body = activity_lines(dcgm.MAX_SERIES).encode()
    assert len(client.activity()) == dcgm.MAX_SERIES      # at the cap: read, and recovered


def test_a_scrape_past_its_cpu_budget_marks_the_source_failing(exporter, caplog):
    from gpustats.sources.errors import CollectionErrors
    errors = CollectionErrors()
    client = DcgmExporterClient(exporter.url, cache_seconds=0, errors=errors,
                                cpu_seconds=0.5, cpu_clock=TickingClock(1.0))
    with caplog.at_level(logging.WARNING):
        assert client.activity() is None
    state = failing_state(errors)
    assert state.last_error_reason == "cpu_deadline"
    assert "more than 0.5 s of CPU" in state.last_error
    assert "dcgm_exporter failing (cpu_deadline)" in caplog.text


def test_the_cpu_budget_counts_from_the_start_of_the_scrape(exporter):
    clock = TickingClock(0.0)
    client = DcgmExporterClient(exporter.url, cache_seconds=0, cpu_clock=clock)
    assert client.activity() == parse_dcgm_activity(GOOD)
    assert clock.reads >= 2               # read when the scrape began, and after each piece


def test_a_large_body_of_activity_series_stops_at_the_cap_not_the_end(exporter):
    from gpustats.sources.errors import CollectionErrors
    errors = CollectionErrors()
    exporter.body = activity_lines(60_000).encode()          # about 3 MB
    client = DcgmExporterClient(exporter.url, cache_seconds=0, errors=errors,
                                timeout_seconds=5.0)
    assert client.activity() is None
    assert failing_state(errors).last_error_reason == "too_many_series"


def test_the_body_cap_is_what_a_real_exporter_serves_with_margin():
    # 16 GPUs x 8 (the GPU and 7 instances) x ~60 families x ~400 bytes a line: ~3 MB.
    assert 4 * 1024 * 1024 <= dcgm.MAX_BODY_BYTES <= 16 * 1024 * 1024
    assert 256 < dcgm.MAX_SERIES <= 4096
