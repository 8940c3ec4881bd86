"""The one JSON writer: all or nothing, and a reader that takes garbage as empty."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

from mdindex.jsonfile import private_dir, read_json, write_json
from tests.conftest import umask


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_json_leaves_the_file_whole_and_nothing_beside(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    write_json(path, {"a": 1})
    write_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]


def test_the_folders_it_makes_are_private_whatever_the_umask(tmp_path: Path) -> None:
    """Under the common umask 002 a Python caller's cache folders came out
    group-writable (mkdir's parents take the umask's mode), and the run that
    made them refused them as writable by others."""
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs").chmod(0o755)  # whatever umask an earlier test in this worker left
    with umask(0o002):
        write_json(tmp_path / "theirs" / "cache" / "calibration" / "c.json", {"a": 1})
        private_dir(tmp_path / "theirs" / "cache" / "onnx" / "key")
        private_dir(tmp_path / "theirs" / "cache" / "onnx" / "key")  # there already: kept
    made = tmp_path / "theirs" / "cache"
    assert mode(tmp_path / "theirs") == 0o755  # not made here: left as it was
    for folder in (made, made / "calibration", made / "onnx", made / "onnx" / "key"):
        assert mode(folder) == 0o700, folder
    assert mode(made / "calibration" / "c.json") == 0o600
    assert read_json(made / "calibration" / "c.json") == {"a": 1}


def test_a_umask_that_takes_the_owners_write_still_makes_usable_folders(tmp_path: Path) -> None:
    """Under umask 277 the folders came out 0500: the state dir was made, and
    nothing could be written into it."""
    with umask(0o277):
        write_json(tmp_path / "state" / "versions" / "catalog.json", {"a": 1})
    for folder in (tmp_path / "state", tmp_path / "state" / "versions"):
        assert mode(folder) == 0o700, folder
    assert read_json(tmp_path / "state" / "versions" / "catalog.json") == {"a": 1}
    with umask(0o477):  # the owner may not even read what mkdir makes
        private_dir(tmp_path / "cache" / "onnx")
    for folder in (tmp_path / "cache", tmp_path / "cache" / "onnx"):
        assert mode(folder) == 0o700, folder


def test_read_json_takes_missing_or_garbled_files_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    assert read_json(path) == {}
    for garbage in ("{not json", "[1, 2]", "null", ""):
        path.write_text(garbage)
        assert read_json(path) == {}
    write_json(path, {"k": [1, "x"]})
    assert read_json(path) == {"k": [1, "x"]}


# -- hostile files, generated -------------------------------------------------
# Every reader of a JSON file mdindex keeps (the backend measurement, the
# versions catalog, the ONNX export's record, the lock's and the guard's
# records) is given what Hypothesis makes of a real one: values replaced by any
# JSON, nesting past any parser, NaN, huge numbers, raw bytes. Each must do
# what the docs say of a damaged file and nothing else: a cache is measured
# again (None), a catalog is one ConfigError line, a record is empty.

import base64  # noqa: E402
import fcntl  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mdindex.embedding import calibration, onnx_export  # noqa: E402
from mdindex.embedding.model import resolve_model  # noqa: E402
from mdindex.errors import ConfigError  # noqa: E402
from mdindex.index import guard, lock  # noqa: E402
from mdindex.jsonfile import MAX_DEPTH, JsonRefused, load_json, parse_json  # noqa: E402
from mdindex.runtime import fingerprint  # noqa: E402
from mdindex.versions.catalog import Catalog  # noqa: E402
from tests.conftest import settings_for  # noqa: E402
from tests.regressions import found, kept, load  # noqa: E402

EXAMPLES = Path(__file__).with_name("examples") / "files"
KEY = {"model_sha256": "m1", "cpu": "c", "candidates": "torch-fp32,onnx-fp32", "torch": "2"}
CHOICE = {
    "backend": "onnx", "precision": "fp32", "reason": "why", "source": "measured",
    "measured_at": "2026-01-01", "chunks_per_s": {"onnx-fp32": 50.0},
    "tokens_per_s": {"onnx-fp32": 9000.0}, "load_s": {"onnx-fp32": 0.5},
    "gate": {"onnx-fp32": {"passed": True}},
}  # fmt: skip
# a catalog that loads (its fingerprint is its params'), so the changes made of
# it reach every check behind the types
FP = fingerprint({"model": "all-MiniLM-L6-v2"})
CATALOG = {
    "alias": "mdindex",
    "live": FP,
    "versions": {FP: {"collection": f"mdindex__{FP}", "status": "complete",
                      "params": {"model": "all-MiniLM-L6-v2"}}},
}  # fmt: skip

numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(),
    st.sampled_from([1e400, -0.0, 1e300, -1e300, 10**4000]),
)
# a string that is a lone surrogate, a time past year 9999, one too long to quote
odd_text = st.sampled_from(["\ud800", "a\udfffb", "99999-01-01T00:00:00Z", "9" * 4000])
values = st.recursive(
    st.none() | st.booleans() | numbers | st.text(max_size=10) | odd_text,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)


def _mutated(draw: st.DrawFn, base: Any) -> Any:
    """``base`` with a few of its values (at any depth) replaced by any JSON."""
    out = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(0, 3))):
        node, path = out, []
        while isinstance(node, dict) and node and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(node)))
            path.append((node, key))
            node = node[key]
        if path:
            parent, key = path[-1]
            parent[key] = draw(values)
        else:
            out = draw(values)
    return out


@st.composite
def files(draw: st.DrawFn, base: Any) -> bytes:
    kind = draw(st.sampled_from(["mutated", "mutated", "mutated", "deep", "raw", "twice"]))
    if kind == "deep":
        return draw(st.sampled_from([b"[", b'{"a":', b'[{"k":'])) * draw(st.integers(60, 20000))
    if kind == "raw":
        return draw(st.binary(max_size=300))
    data = _mutated(draw, base)
    text = json.dumps(data, allow_nan=True)
    if kind == "twice" and isinstance(data, dict) and data:  # a key given again, last
        key = draw(st.sampled_from(sorted(data)))
        text = text[:-1] + f", {json.dumps(key)}: {json.dumps(draw(values), allow_nan=True)}}}"
    if draw(st.booleans()):  # json writes inf as Infinity; 1e400 is how others write it
        text = text.replace("Infinity", "1e400")
    return text.encode()


def check_files(
    tmp: Path, calibration_file: bytes, catalog: bytes, meta: bytes, record: bytes
) -> None:
    """Each reader does what the docs say of a damaged file, and nothing else."""
    cache = tmp / "cache"
    calibration.save(
        cache, KEY, calibration._read_choice(dict(CHOICE, name="onnx-fp32"), ["onnx-fp32"])
    )
    (path,) = (cache / "calibration").glob("*.json")
    path.write_bytes(calibration_file)
    got = calibration.cached(cache, KEY)
    assert got is None or got.name in KEY["candidates"].split(",")
    recorded = calibration.recorded(cache, "m1")
    assert recorded is None or recorded.name in KEY["candidates"].split(",")

    s = settings_for(tmp, [])
    s.state_dir.mkdir(parents=True, exist_ok=True)
    (s.state_dir / "mdindex.versions.json").write_bytes(catalog)
    try:
        refused = None
        parse_json(catalog)
    except JsonRefused as exc:
        refused = exc  # a key twice, a lone surrogate: nothing of it is used
    try:
        Catalog.load(s)
        assert refused is None, refused
    except ConfigError as exc:
        assert "\n" not in str(exc) and "unreadable" in str(exc), str(exc)
        # a value from the file is quoted in at most a line (4,079 characters were)
        assert len(str(exc).replace(str(s.state_dir), "")) < 400, str(exc)

    info = resolve_model("all-MiniLM-L6-v2")
    folder = onnx_export._export_dir(info, cache)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(b"not a graph")
    (folder / "meta.json").write_bytes(meta)
    export = onnx_export.find_export(info, cache)
    if export is not None:
        with pytest.raises(ValueError):  # no recorded hash matches these bytes
            onnx_export.open_export(export)

    lock_file = tmp / "x.lock"
    lock_file.write_bytes(record[:4096])
    fd = os.open(lock_file, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held, so read_holder reads the record
        holder = lock.read_holder(lock_file)
        assert isinstance(holder, dict)
    finally:
        os.close(fd)
    assert isinstance(guard.parse_recorded(record.decode("utf-8", "replace")), dict)


def test_the_bounded_reader_refuses_depth_nan_and_size() -> None:
    assert parse_json("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    for bad in (
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
        "[" * 100_000,
        '{"a": NaN}',
        "[Infinity]",
    ):
        with pytest.raises(JsonRefused):
            parse_json(bad)
    with pytest.raises(JsonRefused, match="more than 10 bytes"):
        parse_json(b"[1, 2, 3, 4, 5]", max_bytes=10)
    assert parse_json(r'["[[[[", "\"{{{{"]', max_depth=2) == ["[[[[", '"{{{{']


def test_a_number_past_a_floats_range_is_refused_as_infinity_is() -> None:
    """Found by a hostile review: json reads 1e400 as inf, and the bounded
    reader, which refused Infinity, let it through as a number."""
    for bad in (
        "1e400",
        "[-1e400]",
        '{"a": 1.5e309}',
        "[" + "9" * 400 + ".0]",
        "1E+999",
        "[" + "9" * 210 + "e99]",  # no exponent of three digits: found by its digits
        "[0.1e00000310]",
    ):
        with pytest.raises(JsonRefused, match="past a float's range"):
            parse_json(bad)
    assert parse_json("[1e308, -1e308, 1e-400, 2.5]") == [1e308, -1e308, 0.0, 2.5]
    assert parse_json("[0.00001e313, 1e0099]") == [1e308, 1e99]
    assert parse_json("[1" + "0" * 400 + "]") == [10**400]  # a whole number stays one


def test_a_key_given_twice_is_refused_naming_it() -> None:
    """Found by a hostile review: json kept the last of two values for a key,
    silently; a catalog or an answer that says two things says neither."""
    for bad, key in (
        ('{"a": 1, "a": 2}', "'a'"),
        ('{"v": [{"x": 1, "y": 2, "x": 1}]}', "'x'"),
        ('{"' + "k" * 500 + '": 1, "' + "k" * 500 + '": 1}', "… (500 characters)"),
    ):
        with pytest.raises(JsonRefused) as caught:
            parse_json(bad)
        assert str(caught.value).startswith("key ") and key in str(caught.value)
        assert str(caught.value).endswith(" is given twice in an object")
        assert len(str(caught.value)) < 160
    assert parse_json('[{"a": 1}, {"a": 2}]') == [{"a": 1}, {"a": 2}]


def test_a_lone_surrogate_is_refused_a_pair_is_one_character() -> None:
    """Found by a hostile review: "\\ud800" was read as a str that failed later,
    when written as UTF-8 (a payload, a log, an answer)."""
    for bad in ('["\\ud800"]', '{"\\udc00": 1}', '{"a": ["x\\uDBFFy"]}', '"\\ude00\\ud83d"'):
        with pytest.raises(JsonRefused, match="lone surrogate"):
            parse_json(bad)
    assert parse_json('["\\ud83d\\ude00", "\\\\ud800"]') == ["\U0001f600", "\\ud800"]
    with pytest.raises(JsonRefused, match="lone surrogate"):  # its bytes: json passes them
        parse_json(b'["\xed\xa0\x80"]')


def test_catalog_and_cache_refuse_keys_twice_surrogates_and_unbounded_times(
    tmp_path: Path,
) -> None:
    """A catalog is one ConfigError line, a calibration cache is measured again."""
    s = settings_for(tmp_path, [])
    s.state_dir.mkdir(parents=True, exist_ok=True)
    path = s.state_dir / "mdindex.versions.json"
    good = json.dumps(CATALOG)
    version = f'"collection": "mdindex__{FP}", "status": "complete"'
    for bad, why in [
        (good[:-1] + ', "live": null}', "key 'live' is given twice"),
        (good.replace('"status"', '"status": "building", "status"'), "'status' is given twice"),
        (good.replace('"mdindex"', '"mdindex\\ud800"', 1), "lone surrogate"),
        *(
            (good.replace(version, f"{version}, {field}: {value}"), why)
            for field in ('"created_at"', '"completed_at"', '"live_since"')
            for value, why in [
                ("1e300", "Input should be a valid string"),
                ('"-1e300"', "must be an ISO 8601 time, not '-1e300'"),
                ('"99999-01-01T00:00:00Z"', "time, not '99999-01-01T00:00:00Z'"),
                ('"' + "9" * 4000 + '"', "time, not '" + "9" * 79 + "… (4,000 characters)"),
            ]
        ),
    ]:
        path.write_text(bad)
        with pytest.raises(ConfigError) as caught:
            Catalog.load(s)
        line = str(caught.value)
        assert "unreadable" in line and why in line and "\n" not in line, (bad[:200], line)
        assert len(line.replace(str(path), "")) < 300, line
    path.write_text(good.replace(version, f'{version}, "created_at": "2026-12-04T09:33:51.123Z"'))
    assert Catalog.load(s).versions[FP].created_at == "2026-12-04T09:33:51.123Z"

    cache = tmp_path / "cache"
    choice = calibration._read_choice(dict(CHOICE, name="onnx-fp32"), ["onnx-fp32"])
    calibration.save(cache, KEY, choice)
    (cached,) = (cache / "calibration").glob("*.json")
    assert calibration.cached(cache, KEY) is not None
    whole = cached.read_text()
    for bad in (
        whole.replace('"key": {', '"key": {"cpu": "c", ', 1),
        whole.replace('"reason": "why"', '"reason": "wh\\udfffy"'),
        whole.replace('"measured_at": "2026-01-01"', '"measured_at": "99999-01-01"'),
        whole.replace('"measured_at": "2026-01-01"', '"measured_at": 1e300'),
    ):
        assert bad != whole
        cached.write_text(bad)
        assert calibration.cached(cache, KEY) is None
        assert calibration.recorded(cache, "m1") is None


def test_found_examples_stay_fixed(tmp_path: Path) -> None:
    for i, path in enumerate(found(EXAMPLES)):
        example = {k: base64.b64decode(v) for k, v in load(path).items()}
        check_files(tmp_path / str(i), **example)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,  # the found examples are replayed by the test above
)
@given(
    calibration_file=files({"key": KEY, "choice": dict(CHOICE, name="onnx-fp32")}),
    catalog=files(CATALOG),
    meta=files({"exportable": True, "inputs": ["input_ids", "attention_mask"], "sha256": "0" * 64}),
    record=files({"pid": 1, "command": "watch", "socket": "/tmp/x.sock", "http_port": 8080}),
)
def test_generated_hostile_state_files(
    tmp_path_factory: pytest.TempPathFactory,
    calibration_file: bytes,
    catalog: bytes,
    meta: bytes,
    record: bytes,
) -> None:
    example = {
        "calibration_file": calibration_file,
        "catalog": catalog,
        "meta": meta,
        "record": record,
    }
    encoded = {k: base64.b64encode(v).decode() for k, v in example.items()}
    with kept(EXAMPLES, encoded):
        check_files(tmp_path_factory.mktemp("files"), **example)


@pytest.mark.serial
def test_unterminated_strings_are_measured_in_linear_time() -> None:
    """Every quote of an unterminated string started a new scan to the end of
    the text: 40 KB of '\\"' took 4 s, a 16 MB catalog would take days."""
    for raw in (b'"' + b'\\"' * 400_000, b'["' + b'\\"' * 400_000, b'"\\' * 400_000):
        started = time.perf_counter()
        with pytest.raises(JsonRefused, match="not JSON"):
            parse_json(raw)
        assert time.perf_counter() - started < 2
    assert parse_json(r'["a\"[[", "\\", "]]"]', max_depth=1) == ['a"[[', "\\", "]]"]


def _returns_within(call: Any, seconds: float, fifo: Path) -> Any:
    """``call``'s answer, or an AssertionError when it has not come within ``seconds``
    (its thread is then freed by opening ``fifo`` for writing)."""
    import threading

    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:  # raised again in the test's thread
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(seconds)
        raise AssertionError(f"blocked on {fifo}")
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def test_a_fifo_where_a_json_file_goes_is_no_file_and_blocks_nothing(tmp_path: Path) -> None:
    """`mkfifo STATE/mdindex.versions.json` (or mdindex.lock, or a calibration
    file in the cache): status, search and every model load waited forever on
    the open, as no writer came."""
    from mdindex.config import load_settings
    from mdindex.versions.catalog import Catalog

    state = tmp_path / "state"
    state.mkdir()
    catalog = state / "mdindex.versions.json"
    os.mkfifo(catalog)
    with pytest.raises(OSError, match="not a regular file"):
        _returns_within(lambda: load_json(catalog), 5, catalog)
    assert _returns_within(lambda: read_json(catalog), 5, catalog) == {}
    s = load_settings({"state_dir": str(state)})
    with pytest.raises(ConfigError, match=r"versions\.json is unreadable"):
        _returns_within(lambda: Catalog.load(s), 5, catalog)
    held = state / "mdindex.lock"
    os.mkfifo(held)
    assert _returns_within(lambda: lock.read_holder(held), 5, held) is None
    cache = tmp_path / "cache" / "calibration"
    cache.mkdir(parents=True)
    os.mkfifo(cache / "0.json")
    assert (
        _returns_within(lambda: calibration.recorded(cache.parent, "x"), 5, cache / "0.json")
        is None
    )


def test_a_path_lstat_cannot_see_is_an_oserror_not_a_climb_for_ever(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A relative cache or state dir while the working folder cannot be
    searched (``chmod 0 .`` under a non-root user): every ``lstat`` fails, so
    ``lexists`` is False for ".", whose parent is "." again; private_dir went
    round for ever, its list growing until memory ran out."""
    monkeypatch.chdir(tmp_path)
    real = os.path.lexists
    calls = []

    def blind(path: Any) -> bool:  # what EACCES on the working folder looks like
        calls.append(path)
        assert len(calls) < 1000, "private_dir climbs for ever"
        return False if not os.path.isabs(path) else real(path)

    def refused(self: Path, mode: int = 0o777) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(os.path, "lexists", blind)
    monkeypatch.setattr(Path, "mkdir", refused)
    with pytest.raises(PermissionError):
        private_dir(Path("cache") / "onnx")
    with pytest.raises(PermissionError):
        write_json(Path("state") / "c.json", {"a": 1})
