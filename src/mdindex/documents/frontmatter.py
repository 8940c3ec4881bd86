"""Frontmatter: the YAML block at the top of a document, parsed safely (no
aliases or anchors, a size limit) and turned into payload values every store
takes and reads back."""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import re
from typing import Any

from mdindex.outside import shown

FRONTMATTER_MAX_BYTES = 64 * 1024
_FM_CLOSE = re.compile(r"^(?:---|\.\.\.)[ \t]*$", re.MULTILINE)


@functools.cache
def _yaml() -> tuple[Any, Any]:
    """PyYAML and libyaml's C loader when PyYAML was built with it: pure-Python
    YAML was the largest cost of parsing the Hugo docs' frontmatter."""
    import yaml

    return yaml, getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _FrontmatterProblem(Exception):
    pass


def _load_yaml_mapping(source: str) -> dict[str, Any]:
    # Aliases and anchors are refused outright: they are what alias bombs are made of.
    yaml, loader = _yaml()
    try:
        for event in yaml.parse(source, Loader=loader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise _FrontmatterProblem("uses YAML anchors or aliases, which are not allowed")
        data = yaml.load(source, Loader=loader)
    except RecursionError as exc:
        raise _FrontmatterProblem("is nested too deep to read") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise _FrontmatterProblem(f"malformed YAML{where}: {problem}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _FrontmatterProblem(f"is a YAML {type(data).__name__}, not a mapping")
    return data


# What a frontmatter value may be once it is a payload value. Every store must
# take it and read it back: qdrant-edge accepted a 130-deep list and then could
# not read its own WAL again (serde's recursion limit, about 125 levels), and
# refused NaN and infinities outright.
MAX_DEPTH = 8  # containers inside containers, the frontmatter mapping counting as 1
MAX_KEYS = 512  # keys in all the mappings together
MAX_STRING = 16_384  # characters in one string (key or value)
MAX_META_BYTES = FRONTMATTER_MAX_BYTES  # the whole meta object as JSON
INT64 = (-(2**63), 2**63 - 1)
MAX_PROBLEMS = 5  # lines said about one document's frontmatter


def payload_meta(data: dict[Any, Any]) -> tuple[dict[str, Any], list[str]]:
    """Frontmatter as payload values every store takes and reads back, and a line
    for each thing that did not fit: nested deeper than MAX_DEPTH (stringified),
    NaN or infinite (dropped), an integer beyond 64 bits (stringified), a string
    over MAX_STRING or with lone surrogates, a key past MAX_KEYS, the whole over
    MAX_META_BYTES (the largest keys dropped)."""
    problems: list[str] = []
    keys = [0]

    def clean(value: Any, where: str, depth: int) -> tuple[bool, Any]:
        if isinstance(value, dict):
            if depth >= MAX_DEPTH:
                problems.append(f"{where} is nested over {MAX_DEPTH} levels; stored as text")
                return True, _text(value, where, problems)
            out: dict[str, Any] = {}
            for k, v in value.items():
                keys[0] += 1
                if keys[0] > MAX_KEYS:
                    problems.append(f"{where} has keys past the first {MAX_KEYS}; dropped")
                    break
                key = _text(k, f"a key of {where}", problems)
                if key in out:
                    problems.append(f"{where}.{key[:40]} is given twice; the last one kept")
                keep, item = clean(v, f"{where}.{key[:40]}", depth + 1)
                if keep:
                    out[key] = item
            return True, out
        if isinstance(value, list | tuple | set | frozenset):
            if depth >= MAX_DEPTH:
                problems.append(f"{where} is nested over {MAX_DEPTH} levels; stored as text")
                return True, _text(value, where, problems)
            items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
            cleaned = [clean(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(items)]
            return True, [item for keep, item in cleaned if keep]
        if isinstance(value, bool) or value is None:
            return True, value
        if isinstance(value, int):
            if INT64[0] <= value <= INT64[1]:
                return True, value
            problems.append(f"{where} is an integer beyond 64 bits; stored as text")
            return True, str(value)
        if isinstance(value, float):
            if math.isfinite(value):
                return True, value
            problems.append(f"{where} is {value} (not a finite number); dropped")
            return False, None
        if isinstance(value, dt.date | dt.datetime | dt.time):
            return True, value.isoformat()
        if isinstance(value, bytes):
            return True, _text(value.decode("utf-8", "replace"), where, problems)
        return True, _text(value, where, problems)

    _, meta = clean(data, "frontmatter", 0)
    size = len(json.dumps(meta, ensure_ascii=False))
    if size > MAX_META_BYTES:
        for key in sorted(meta, key=lambda k: -len(json.dumps(meta[k], ensure_ascii=False))):
            size -= len(json.dumps({key: meta.pop(key)}, ensure_ascii=False)) - 2
            problems.append(f"frontmatter.{key[:40]} is too large; dropped (over {MAX_META_BYTES})")
            if size <= MAX_META_BYTES:
                break
    # a key is the document's: a line break or ESC in it must not start a line
    # or drive the terminal where the reason is printed
    problems = [shown(p) for p in problems]
    if len(problems) > MAX_PROBLEMS:  # one file, a few lines: 60 KB of NaNs made 10,000
        more = len(problems) - MAX_PROBLEMS
        problems = [*problems[:MAX_PROBLEMS], f"and {more} more frontmatter values like these"]
    return meta, problems


def _text(value: Any, where: str, problems: list[str]) -> str:
    """A value as a string a store can hold: valid UTF-8, at most MAX_STRING."""
    text = value if isinstance(value, str) else _as_text(value)
    if len(text) > MAX_STRING:
        problems.append(f"{where} is over {MAX_STRING} characters; cut")
        text = text[:MAX_STRING]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        problems.append(f"{where} holds lone surrogates; replaced")
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _as_text(value: Any) -> str:
    if isinstance(value, dict | list | tuple | set | frozenset):
        return _flat(value)
    return str(value)


def _flat(value: Any) -> str:
    """A container as compact JSON-like text, without recursion (YAML nests up to
    1,000 levels; Python's stack does not), stopping past MAX_STRING."""
    out: list[str] = []
    size = 0
    stack: list[Any] = [value]  # what is left to write, the next on top
    while stack and size <= MAX_STRING:
        item = stack.pop()
        if isinstance(item, _Close):
            piece = item.text
        elif isinstance(item, dict):
            piece = "{"
            stack.append(_Close("}"))
            pairs = list(item.items())
            for i in range(len(pairs) - 1, -1, -1):
                key, val = pairs[i]
                stack += [val, _Close((", " if i else "") + json.dumps(str(key)) + ": ")]
        elif isinstance(item, list | tuple | set | frozenset):
            piece = "["
            stack.append(_Close("]"))
            items = list(item)
            for i in range(len(items) - 1, -1, -1):
                stack += [items[i]] + ([_Close(", ")] if i else [])
        else:
            piece = json.dumps(item, ensure_ascii=False, default=str)
        out.append(piece)
        size += len(piece)
    return "".join(out)[: MAX_STRING + 1]


class _Close:
    """Literal text in ``_flat``'s stack (a separator or a closing bracket)."""

    def __init__(self, text: str) -> None:
        self.text = text


def split_frontmatter(text: str) -> tuple[dict[str, Any], int, list[str]]:
    """Return (frontmatter mapping, body start offset, warnings)."""
    if not (text.startswith("---\n") or text == "---"):
        return {}, 0, []
    window = text[: 4 + FRONTMATTER_MAX_BYTES]
    close = _FM_CLOSE.search(window, 4)
    if close is None:
        if len(text) > len(window):
            return (
                {},
                0,
                [f"frontmatter larger than {FRONTMATTER_MAX_BYTES} bytes; treated as body text"],
            )
        return {}, 0, ["unterminated frontmatter; treated as body text"]
    source = text[4 : close.start()]
    try:
        meta, problems = payload_meta(_load_yaml_mapping(source))
    except _FrontmatterProblem as exc:
        return {}, 0, [f"frontmatter {exc}; treated as body text"]
    except ValueError:  # int() past 4,300 digits, in YAML's reader or in str()/repr()
        return {}, 0, ["frontmatter holds a number too long to read; treated as body text"]
    body_start = min(close.end() + 1, len(text))
    return meta, body_start, problems
