"""Search: a question to the chunks that answer it, as the CLI, the daemon and
the integrations ask it.

A ``Query`` is checked once where it enters (flags, HTTP parameters, tool
arguments), then ``search`` embeds it (dense, sparse or both) and asks the
store in one request: in hybrid mode the engine prefetches ``CANDIDATES``
of each kind and fuses them. Filters run inside the engine; a path glob
runs there as its literal prefix, and the glob itself on the hits, with
more candidates asked for so ``k`` hits survive it.

By default the windows of one heading section that overlap or touch are
joined into one passage, one hit, and a section's later passages count less
(``ranking.passages``): one long page cannot fill the top ten, and a second
answer in it is not lost. Text before the first heading, or in a file without
headings, is never joined. ``per_section=False`` returns every window. In
hybrid mode the sections a question names by their heading come first
(``ranking.headings_first``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mdindex.documents.language import detect, normal_code
from mdindex.documents.tags import normal_tag
from mdindex.embedding.embedder import Embedder
from mdindex.embedding.sparse import SparseEncoder
from mdindex.index.payload import public
from mdindex.index.ranking import headings_first, passages
from mdindex.outside import flag, integer, quoted, string, strings
from mdindex.sinks import Store
from mdindex.sinks.base import FULL_SCAN_KB, SPARSE_SCAN, SearchFilter, StoreQuery

MODES = ("dense", "sparse", "hybrid")
FUSIONS = ("rrf", "dbsf")
MAX_K = 100
MAX_QUERY_CHARS = 4096
# Candidates of each kind that hybrid search fuses, and how: distribution-based
# score fusion over 100 of each measured best on anthropic-docs (recall@3 0.715,
# MRR@3 0.880; 50: 0.710 / 0.875; 20: 0.685 / 0.858; RRF at best 0.703 / 0.853
# with k=2, 0.670 / 0.830 with k=60). DBSF keeps how far ahead a hit is,
# which RRF's ranks lose: a rare identifier BM25 alone knows still wins.
CANDIDATES = 100
# A glob is tested on this many hits per hit wanted, at most MAX_HITS; one hit
# per section is kept from this many per hit wanted.
GLOB_OVERSAMPLE = 10
SECTION_OVERSAMPLE = 3
MAX_HITS = 1000
# Letters a question needs for its language to be detected (a CJK character
# counts 3): two Chinese characters are a question, a Latin-script question is
# only taken for another language than English when the detector is sure.
QUERY_MIN_WEIGHT = 6
_META_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_GLOB_CHARS = "*?["


@dataclass(frozen=True)
class Query:
    """One search, checked: every field holds a value the store may be given."""

    text: str
    k: int = 5
    mode: str = "hybrid"
    roots: tuple[str, ...] = ()
    path: str = ""  # a prefix of doc_path, or a glob (* ? [ ])
    where: tuple[tuple[str, str], ...] = ()  # frontmatter key = value, all must hold
    tags: tuple[str, ...] = ()  # every tag must be the document's (a/b also matches a)
    fusion: str = "dbsf"
    per_section: bool = True  # one hit per heading section (see the module docstring)
    lang: str = ""  # only documents in this language, and the query analysed as it

    def __post_init__(self) -> None:
        # The Python API builds a Query from its caller's arguments: a type is checked
        # here too, as from_params checks it (path=None was a TypeError, not this line).
        if not isinstance(self.text, str):
            raise ValueError(f"the query must be a string, not {quoted(self.text)}")
        if not self.text.strip():
            raise ValueError("the query is empty")
        if len(self.text) > MAX_QUERY_CHARS:
            raise ValueError(f"the query is over {MAX_QUERY_CHARS} characters")
        object.__setattr__(self, "k", integer(self.k, "k", 1, MAX_K))
        object.__setattr__(self, "per_section", flag(self.per_section, "per_section"))
        object.__setattr__(self, "path", string(self.path, "path"))
        for name in ("roots", "tags"):
            object.__setattr__(self, name, strings(getattr(self, name), name))
        if not all(isinstance(kv, tuple) and len(kv) == 2 for kv in self.where):
            raise ValueError("where must hold (key, value) pairs")
        for key, value in self.where:
            string(key, "where key")
            string(value, "where value")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {quoted(self.mode)}")
        if self.fusion not in FUSIONS:
            raise ValueError(
                f"fusion must be one of {', '.join(FUSIONS)}, not {quoted(self.fusion)}"
            )
        object.__setattr__(self, "tags", tuple(normal_tag(t) for t in self.tags))
        if self.lang:
            code = normal_code(self.lang) if isinstance(self.lang, str) else None
            if code is None:
                shown = quoted(self.lang)
                raise ValueError(f"lang must be a language code (ISO 639-1, as en), not {shown}")
            object.__setattr__(self, "lang", code)
        values = (self.text, self.path, *self.roots, *self.tags)
        for value in (*values, *(v for kv in self.where for v in kv)):
            if "\x00" in value:
                raise ValueError("a search parameter holds a NUL character")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(
                    "a search parameter is not valid Unicode (a lone surrogate)"
                ) from None
        if len(self.path) > 1024 or any(len(r) > 256 for r in self.roots) or len(self.roots) > 64:
            raise ValueError("a root or path filter is too long")
        if len(self.where) > 16:
            raise ValueError("at most 16 --where filters")
        if len(self.tags) > 16 or any(not 0 < len(t) <= 100 for t in self.tags):
            raise ValueError("at most 16 --tag filters, each 1 to 100 characters besides # and /")
        for key, value in self.where:
            if not _META_KEY.match(key):
                raise ValueError(
                    f"--where key {quoted(key)} must be a frontmatter field name "
                    "(letters, digits, _ . -)"
                )
            if len(value) > 256:
                raise ValueError(f"--where value for {key} is over 256 characters")

    @classmethod
    def from_params(
        cls, params: Mapping[str, Any], default_mode: str = "hybrid", default_fusion: str = "dbsf"
    ) -> Query:
        """A query from loosely typed parameters (HTTP, tool arguments):
        ``q``/``query``, ``k``, ``mode``, ``root`` (one or a list), ``path``,
        ``where`` ("key=value", one or a list, or a mapping)."""
        text = params.get("q", params.get("query", ""))
        if not isinstance(text, str):
            raise ValueError("the query must be a string")
        return cls(
            text=text,
            k=integer(params.get("k", 5), "k", 1, MAX_K),
            mode=string(params.get("mode") or default_mode, "mode"),
            roots=strings(params.get("root"), "root"),
            path=string(params.get("path") or "", "path"),
            where=parse_where(params.get("where")),
            tags=strings(params.get("tag"), "tag"),
            fusion=string(params.get("fusion") or default_fusion, "fusion"),
            per_section=flag(params.get("per_section", True), "per_section"),
            lang=string(params.get("lang") or "", "lang"),
        )

    def as_params(self) -> list[tuple[str, Any]]:
        """The query as the daemon's /search parameters (what ``from_params`` reads)."""
        params: list[tuple[str, Any]] = [
            ("q", self.text),
            ("k", self.k),
            ("mode", self.mode),
            ("path", self.path),
            ("fusion", self.fusion),
            ("per_section", "true" if self.per_section else "false"),
        ]
        params += [("root", r) for r in self.roots]
        params += [("where", f"{key}={value}") for key, value in self.where]
        params += [("tag", tag) for tag in self.tags]
        params += [("lang", self.lang)] if self.lang else []
        return params

    def store_filter(self) -> SearchFilter:
        prefix = self.path.lstrip("/")
        if prefix.startswith("./"):
            prefix = prefix[2:]
        cut = min((prefix.find(c) for c in _GLOB_CHARS if c in prefix), default=len(prefix))
        return SearchFilter(
            roots=self.roots,
            path_prefix=prefix[:cut],
            where=tuple((key, candidates(value)) for key, value in self.where),
            tags=self.tags,
            lang=self.lang,
        )

    @property
    def glob(self) -> str:
        """The path glob to test on hits, or "" for a plain prefix."""
        path = self.path.lstrip("/").removeprefix("./")
        return path if any(c in path for c in _GLOB_CHARS) else ""


def parse_where(value: Any) -> tuple[tuple[str, str], ...]:
    """``key=value`` strings (or a mapping) as (key, value) pairs."""
    if value is None or value == "":
        return ()
    if isinstance(value, Mapping):
        return tuple((string(k, "where key"), _scalar(v)) for k, v in value.items())
    out = []
    for item in strings(value, "where"):
        key, sep, val = item.partition("=")
        if not sep:
            raise ValueError(f"--where {quoted(item)} must be key=value")
        out.append((key.strip(), val.strip()))
    return tuple(out)


def candidates(value: str) -> tuple[str | int | bool, ...]:
    """What a frontmatter field written as ``value`` may hold: the string, and
    the number or boolean it spells (YAML reads ``draft: true`` as a boolean)."""
    out: list[str | int | bool] = [value]
    if re.fullmatch(r"-?\d{1,18}", value):
        out.append(int(value))
    if value.lower() in ("true", "false"):
        out.append(value.lower() == "true")
    return tuple(out)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    raise ValueError("a where value must be a string, an integer or a boolean")


def search(
    embedder: Embedder,
    encoder: SparseEncoder | None,
    store: Store,
    query: Query,
    prompt: str = "",
    model_languages: Sequence[str] = ("*",),
    paths_under: PathsUnder | None = None,
) -> list[dict[str, Any]]:
    """The chunks that best answer ``query``, as users see them (score, payload).
    ``prompt``: the version's query prompt, put before the text the model embeds.
    ``model_languages``: those the dense model covers ("*": all); a hybrid
    question in another language is answered by its sparse half alone.
    ``paths_under``: the documents under a path prefix (``name_paths``).

    An index without sparse vectors answers hybrid queries densely, and refuses
    sparse ones."""
    if not store.exists():
        return []
    mode = query.mode
    if mode != "dense" and (encoder is None or not store.has_sparse):
        if mode == "sparse":
            raise ValueError(
                "this index has no sparse vectors (sparse_vectors = false); use --mode dense"
            )
        mode = "dense"
    sparse = None
    if mode != "dense" and encoder is not None:
        # English terms and the question's own language's (mdindex.embedding.sparse)
        lang = query.lang or detect(query.text, min_weight=QUERY_MIN_WEIGHT)
        sparse = encoder.query(query.text, [lang])
        covered = covers(model_languages, lang, query.text)
        if mode == "hybrid" and sparse.indices and not covered:
            # The model does not read the question's language: its half only drags
            # the sparse one down (bench/languages.py with MiniLM, recall@3: CMRC
            # 2018 0.956 fused, 0.995 sparse alone; ARCD 0.783 and 0.936).
            mode = "sparse"
    if sparse is not None and not sparse.indices and mode == "hybrid":
        sparse = None  # only stop words: the dense half answers alone
    dense = embedder.embed_query(prompt + query.text).tolist() if mode != "sparse" else None
    glob = query.glob
    limit = query.k * (GLOB_OVERSAMPLE if glob else 1)
    limit = min(limit * (SECTION_OVERSAMPLE if query.per_section else 1), MAX_HITS)
    request = StoreQuery(
        k=limit,
        dense=dense,
        sparse=sparse,
        filter=name_paths(query.store_filter(), paths_under, dense),
        fusion=query.fusion,
        candidates=max(CANDIDATES, limit),
    )
    if dense is None and sparse is None:
        return []
    hits = store.search(request)
    if glob:
        hits = [h for h in hits if fnmatch.fnmatchcase(str(h.payload.get("doc_path", "")), glob)]
    if query.per_section:
        hits = passages(hits)
    if query.mode == "hybrid":
        hits = headings_first(query.text, hits)
    return [{"score": h.score, **public(h.payload)} for h in hits[: query.k]]


# (roots, prefix, most points) -> paths under it holding points (index.state.points_under)
PathsUnder = Callable[[tuple[str, ...], str, int], list[str] | None]


def name_paths(
    where: SearchFilter, paths_under: PathsUnder | None, dense: Sequence[float] | None
) -> SearchFilter:
    """``where`` with the documents under its path prefix named, when they hold
    few enough points for the engine to scan them (``FULL_SCAN_KB`` of the
    query's vectors; ``SPARSE_SCAN`` without one). A prefix alone is tested on
    every point the engine's graph visits. bench/path_filter.py at 1.09M points
    (AMD EPYC): 1,107 documents (6k points) took 49.2 ms of dense search as a
    prefix, 2.6 named (hybrid 69.9, 32.1; the state names them in 3 ms); 11,070
    (60k points), past the threshold, 22.2 as a prefix and 47.0 named."""
    if not where.path_prefix or paths_under is None:
        return where
    most = SPARSE_SCAN if dense is None else FULL_SCAN_KB * 256 // len(dense)
    named = paths_under(where.roots, where.path_prefix, most)
    return replace(where, doc_paths=tuple(named)) if named else where


def covers(model_languages: Sequence[str], lang: str, text: str = "") -> bool:
    """Whether the dense model reads a question in ``lang``. One too short to
    tell ("" unknown, "Итоги") is read by an English model when its letters
    are mostly Latin, by any other when it names no language."""
    if "*" in model_languages or lang in model_languages:
        return True
    if lang:
        return False
    letters = [c for c in text if c.isalpha()]
    latin = sum(c.isascii() for c in letters) * 2 >= len(letters)
    return latin if "en" in model_languages else True
