"""The daemon's API as an attacker meets it: a real daemon, real sockets, real requests.

A local user without the token, a web page in a local browser (DNS
rebinding, cross-site requests), a client that holds connections open: none
of them reads the index or stalls the daemon.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mdindex.config import Timings
from mdindex.daemon.connections import MAX_CONNECTIONS
from mdindex.index.lock import socket_path, token_path
from tests.conftest import TinyEmbedder, settings_for
from tests.daemon.running import QUIET_MS, Running, converges, tcp_port, token_of


@pytest.fixture
def daemon(tmp_path: Path, root: Path):
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS, http_port=0)
    d = Running(s, TinyEmbedder()).start()
    converges(d, tmp_path, root)
    yield d
    if d.thread.is_alive():
        d.stop()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "notes"
    r.mkdir()
    (r / "a.md").write_text("# A\n\nAlpha apples, a secret recipe.\n")
    return r


def request(
    port: int, path: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        body = resp.read().decode()
        return resp.status, json.loads(body) if body.startswith(("{", "[")) else body
    finally:
        conn.close()


@pytest.mark.slow
def test_token_is_required_except_for_health_and_metrics(daemon: Running) -> None:
    port, token = tcp_port(daemon), token_of(daemon)
    for path in ("/search?q=recipe", "/status"):
        assert request(port, path)[0] == 401
        assert request(port, path, {"Authorization": "Bearer wrong"})[0] == 401
        code, body = request(port, path, {"Authorization": f"Bearer {token}"})
        assert code == 200, body
    assert request(port, "/reconcile", method="POST")[0] == 401
    assert request(port, "/healthz")[0] == 200
    assert request(port, "/metrics")[0] == 200
    code, hits = request(port, "/search?q=recipe", {"Authorization": f"Bearer {token}"})
    assert hits[0]["doc_path"] == "a.md"


@pytest.mark.slow
def test_browser_requests_are_refused(daemon: Running) -> None:
    """DNS rebinding sends the attacker's Host; a cross-site request an Origin."""
    port, token = tcp_port(daemon), token_of(daemon)
    auth = {"Authorization": f"Bearer {token}"}
    code, body = request(port, "/search?q=recipe", {**auth, "Host": f"evil.example:{port}"})
    assert code == 403 and "Host" in body["error"]
    assert request(port, "/healthz", {"Host": "evil.example"})[0] == 403
    code, body = request(
        port, "/reconcile", {**auth, "Origin": "http://evil.example"}, method="POST"
    )
    assert code == 403 and "Origin" in body["error"]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        assert request(port, "/status", {**auth, "Host": host})[0] == 200


@pytest.mark.slow
def test_token_and_socket_are_private(daemon: Running) -> None:
    s = daemon.settings
    for path in (token_path(s.state_dir, s.collection), socket_path(s.state_dir, s.collection)):
        assert stat.S_IMODE(path.lstat().st_mode) == 0o600, path
    assert stat.S_ISSOCK(socket_path(s.state_dir, s.collection).lstat().st_mode)
    daemon.stop()
    assert not socket_path(s.state_dir, s.collection).exists()


@pytest.mark.slow
@pytest.mark.serial
def test_idle_connections_time_out_and_give_way(tmp_path: Path, root: Path) -> None:
    """A client that opens connections and sends nothing cannot stall the API:
    past the bound the oldest of them gives way, and each is closed once the
    request timeout passes (4 s here, to wait out less than the product's 10)."""
    timings = Timings(request_timeout_s=4.0)
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS, http_port=0)
    d = Running(s, TinyEmbedder(), timings=timings).start()
    try:
        converges(d, tmp_path, root)
        port = tcp_port(d)
        opened = time.monotonic()
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_CONNECTIONS + 4)]
        try:
            time.sleep(0.5)
            started = time.monotonic()
            assert request(port, "/healthz")[0] == 200
            assert time.monotonic() - started < 1
            # the oldest gave way at once (before any timeout); the others are
            # closed at the request timeout
            held[0].settimeout(2)
            assert held[0].recv(1) == b""
            assert time.monotonic() - opened < timings.request_timeout_s
            held[-1].settimeout(timings.request_timeout_s + 10)
            assert held[-1].recv(1) == b""
            assert time.monotonic() - started <= timings.request_timeout_s + 5
        finally:
            for sock in held:
                sock.close()
    finally:
        d.stop()


@pytest.mark.slow
@pytest.mark.serial
def test_slow_clients_cannot_lock_anyone_out(daemon: Running) -> None:
    """Issue 23, defect 7: 16 connections sending one header byte every 5 s made
    /healthz answer 503 for as long as they lasted: the timeout was per receive,
    and the 16 slots were taken before authentication."""
    port, token = tcp_port(daemon), token_of(daemon)
    auth = {"Authorization": f"Bearer {token}"}
    slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(64)]
    stop = threading.Event()

    def trickle() -> None:
        line = b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100
        for i in range(len(line)):
            for sock in slow:
                with contextlib.suppress(OSError):
                    sock.sendall(line[i : i + 1])
            if stop.wait(2.0):
                return

    thread = threading.Thread(target=trickle)
    thread.start()
    try:
        time.sleep(1.0)
        for _ in range(5):
            started = time.monotonic()
            assert request(port, "/healthz")[0] == 200
            code, hits = request(port, "/search?q=recipe", auth)
            assert code == 200 and hits[0]["doc_path"] == "a.md"
            assert time.monotonic() - started < 1.0
            time.sleep(0.5)
        # however slowly they go on, they are closed once a whole request is late
        slow[0].settimeout(daemon.daemon.shared.timings.request_timeout_s + 5)
        with contextlib.suppress(ConnectionResetError):
            assert slow[0].recv(1) == b""
    finally:
        stop.set()
        thread.join()
        for sock in slow:
            sock.close()


@pytest.mark.slow
def test_a_non_loopback_host_warns(tmp_path: Path, root: Path, caplog) -> None:
    s = settings_for(tmp_path, [str(root)], http_host="0.0.0.0", http_port=0)
    d = Running(s, TinyEmbedder()).start()
    try:
        assert any("not a loopback address" in r.getMessage() for r in caplog.records)
        port = tcp_port(d)
        assert request(port, "/status", {"Host": f"myhost:{port}"})[0] == 401
        auth = {"Authorization": f"Bearer {token_of(d)}", "Host": f"myhost:{port}"}
        assert request(port, "/status", auth)[0] == 200
    finally:
        d.stop()


@pytest.mark.slow
def test_token_from_a_systemd_credential(tmp_path: Path, root: Path, monkeypatch) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "http-token").write_text("from-the-credential\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    s = settings_for(tmp_path, [str(root)], http_port=0)
    d = Running(s, TinyEmbedder()).start()
    try:
        assert token_of(d) == "from-the-credential"
        port = tcp_port(d)
        assert request(port, "/status", {"Authorization": "Bearer from-the-credential"})[0] == 200
    finally:
        d.stop()


@pytest.mark.slow
def test_search_parameters_are_checked_and_filters_applied(daemon: Running, root: Path) -> None:
    port, token = tcp_port(daemon), token_of(daemon)
    auth = {"Authorization": f"Bearer {token}"}
    (root / "b.md").write_text("---\ntags: [fruit]\n---\n# B\n\nBanana apples.\n")
    assert daemon.daemon.status(30)["caught_up"] is True
    code, hits = request(port, "/search?q=apples&k=10&mode=sparse&where=tags%3Dfruit", auth)
    assert code == 200 and [h["doc_path"] for h in hits] == ["b.md"]
    code, hits = request(port, "/search?q=apples&k=10&path=a&root=notes&mode=hybrid", auth)
    assert code == 200 and [h["doc_path"] for h in hits] == ["a.md"]
    for bad, reason in [
        ("k=0", "k must be 1 to 100"),
        ("k=x", "k must be a number, not 'x'"),
        ("k=nan", "k must be 1 to 100, not nan"),
        ("k=inf", "k must be 1 to 100, not inf"),
        ("k=1e309", "k must be 1 to 100, not inf"),
        ("k=1.5", "k must be a whole number, not 1.5"),
        ("k=" + "9" * 30, "k must be 1 to 100, not a larger number"),
        ("k=" + "9" * 5000, "k must be a number, not '999"),
        ("k=true", "k must be a number, not 'true'"),
        ("mode=exact", "mode must be one of"),
        ("where=tags", "must be key=value"),
        ("where=%24x%3D1", "frontmatter field name"),
        ("path=a%00b", "NUL"),
    ]:
        code, body = request(port, f"/search?q=apples&{bad}", auth)
        assert code == 400 and reason in body["error"], (bad, body)
    assert request(port, "/healthz")[0] == 200  # and the daemon goes on


@pytest.mark.slow
def test_connections_cut_short_leave_no_traceback(
    daemon: Running, capfd: pytest.CaptureFixture[str]
) -> None:
    """Found by a hostile review: a connection shut while its request was still
    arriving made the handler answer a dead socket, and the standard library
    printed a whole BrokenPipe traceback each time (3.2 MB of log in 40 s)."""
    port = tcp_port(daemon)
    held = []
    for _ in range(3):
        for _ in range(MAX_CONNECTIONS + 8):  # past the bound the oldest give way
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: a")
            held.append(sock)
        time.sleep(0.5)
        for sock in held:
            sock.close()
        held.clear()
    time.sleep(1.0)
    assert request(port, "/healthz")[0] == 200
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipe" not in err, err[:2000]


@pytest.mark.slow
def test_a_parameter_given_twice_is_refused_naming_it(daemon: Running) -> None:
    """Found by a hostile review: `lang=en&lang=zh` searched as the first,
    silently. root, where, tag (and fingerprint) may repeat; nothing else."""
    port, token = tcp_port(daemon), token_of(daemon)
    auth = {"Authorization": f"Bearer {token}"}
    for query, key, times in [
        ("q=apples&lang=en&lang=zh", "lang", 2),
        ("q=apples&k=3&k=5", "k", 2),
        ("q=apples&q=pears", "q", 2),
        ("q=apples&mode=sparse&mode=", "mode", 2),
        ("q=apples&fusion=rrf&fusion=rrf&fusion=rrf", "fusion", 3),
    ]:
        code, body = request(port, f"/search?{query}", auth)
        assert code == 400, (query, body)
        assert body == {"error": f"'{key}' is given {times} times; give it once"}, body
    code, body = request(port, "/status?wait=1&wait=0", auth)
    assert code == 400 and body["error"] == "'wait' is given 2 times; give it once"
    code, body = request(port, "/reconcile?force=0&force=1", auth, method="POST")
    assert code == 400 and body["error"] == "'force' is given 2 times; give it once"
    code, hits = request(port, "/search?q=apples&root=notes&root=other&tag=a&tag=b", auth)
    assert code == 200 and hits == []
    code, hits = request(port, "/search?q=apples&root=notes&root=other&mode=sparse", auth)
    assert code == 200 and [h["doc_path"] for h in hits] == ["a.md"]


HTTP_EXAMPLES = Path(__file__).with_name("examples") / "http"
HTTP_LINE = 300  # the reason and a quote of at most 80 characters


@pytest.mark.slow
def test_generated_search_parameters_are_answered_or_refused_in_one_short_line(
    daemon: Running,
) -> None:
    """Found by a hostile review: a 4 KB mode, a 4,000-digit number were
    repeated whole in the error (4,079 characters)."""
    import urllib.parse

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.regressions import found, kept, load

    port, token = tcp_port(daemon), token_of(daemon)
    auth = {"Authorization": f"Bearer {token}"}
    keys = ["q", "k", "mode", "fusion", "lang", "path", "root", "where", "tag", "per_section"]
    value = st.one_of(
        st.text(max_size=20),
        st.text(min_size=100, max_size=2000),
        st.sampled_from(["9" * 4000, "1e400", "-1e300", "x" * 4000, "apples", "3", "sparse"]),
    )

    def check(pairs: list[list[str]]) -> None:
        code, body = request(
            port, "/search?" + urllib.parse.urlencode([tuple(p) for p in pairs]), auth
        )
        assert code in (200, 400), (code, body)
        if code == 400:
            line = body["error"]
            assert "\n" not in line and len(line) <= HTTP_LINE, (len(line), line[:500])

    for path in found(HTTP_EXAMPLES):
        check(load(path))

    @settings(
        max_examples=60,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(st.lists(st.tuples(st.sampled_from(keys), value), max_size=5))
    def generated(given_pairs: list[tuple[str, str]]) -> None:
        pairs = [["q", "apples"], *([k, v] for k, v in given_pairs)]
        with kept(HTTP_EXAMPLES, pairs):
            check(pairs)

    generated()
    code, body = request(port, "/search?q=apples", auth | {"Host": "h" * 5000})
    assert code == 403 and len(body["error"]) <= HTTP_LINE, body


@pytest.mark.slow
def test_an_mcp_body_with_a_key_twice_or_a_lone_surrogate_is_refused(daemon: Running) -> None:
    """Found by a hostile review: the SDK's JSON reader kept the last of a key
    given twice ("name": "status", "name": "search") and read "\\ud800"."""
    port, token = tcp_port(daemon), token_of(daemon)
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    call = '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": %s}'
    for params, why in [
        ('{"name": "status", "name": "search", "arguments": {"query": "x"}}', "'name'"),
        ('{"name": "search", "arguments": {"query": "x", "query": "y"}}', "'query'"),
        ('{"name": "search", "arguments": {"query": "\\ud800"}}', "lone surrogate"),
        ('{"name": "search", "arguments": {"k": 1e400}}', "past a float's range"),
    ]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("POST", "/mcp", body=(call % params).encode(), headers=headers)
            resp = conn.getresponse()
            code, body = resp.status, json.loads(resp.read())
        finally:
            conn.close()
        assert code == 400 and why in body["error"], (params, body)
        assert body["error"].startswith("the MCP request is refused: ")
        assert "\n" not in body["error"] and len(body["error"]) < 200
    assert request(port, "/healthz")[0] == 200


def test_an_empty_fingerprint_is_kept_where_other_empty_parameters_are_not() -> None:
    """`versions drop ""` through the daemon sent fingerprint= and the daemon, which
    leaves empty parameters out, dropped every old version; without it, refused."""
    from mdindex.daemon.http import parameters

    assert parameters("action=drop&fingerprint=") == {"action": ["drop"], "fingerprint": [""]}
    assert parameters("q=apples&path=&mode=") == {"q": ["apples"]}
    assert parameters("action=drop") == {"action": ["drop"]}


def test_a_socket_that_cannot_be_removed_leaves_the_rest_of_the_stop(
    tmp_path: Path, root: Path
) -> None:
    """The state folder made append-only (`chattr -R +a`) under `mdindex watch`:
    removing its socket at the stop raised, so the stores were never closed nor
    the lock released, and the daemon exited 2 ("mdindex.sock: Operation not
    permitted"). A socket path turned into a folder fails the same way."""
    from mdindex.index.lock import WriterLock

    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    d = Running(s, TinyEmbedder()).start()
    converges(d, tmp_path, root)
    sock = socket_path(s.state_dir, s.collection)
    sock.unlink()
    sock.mkdir()
    (sock / "kept").write_text("not ours to remove\n")
    d.stop()
    assert d.exit_code == 0
    with WriterLock(s.state_dir, s.collection, "backfill"):  # released
        pass
    assert (sock / "kept").read_text() == "not ours to remove\n"


@pytest.mark.slow
def test_verify_and_reconcile_take_only_0_or_1(daemon: Running) -> None:
    """Found by a review: `/verify?repair=false` repaired (any value but "" and
    "0" was yes), and `repiar=1` was silently a plain verify."""
    port, token = tcp_port(daemon), token_of(daemon)
    auth = {"Authorization": f"Bearer {token}"}
    for path in (
        "/verify?repair=false",
        "/verify?repair=yes",
        "/verify?repiar=1",
        "/verify?force=2",
        "/reconcile?force=true",
        "/reconcile?repair=1",
    ):
        code, body = request(port, path, auth, method="POST")
        assert code == 400 and "\n" not in body["error"], (path, code, body)
    code, body = request(port, "/verify?repair=0&force=0", auth, method="POST")
    assert code == 200 and body["in_sync"] is True and body["repaired"] is False
    code, body = request(port, "/reconcile?force=0", auth, method="POST")
    assert code == 200 and body["files_seen"] == 1
