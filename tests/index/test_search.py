"""Search: checked queries, dense / sparse / hybrid in the engine, filters inside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mdindex.index.ranking import MAX_PASSAGES
from mdindex.index.search import Query, name_paths, parse_where, search
from mdindex.index.view import path_namer
from mdindex.query.status import offline_status
from mdindex.runtime import make_models, make_store
from mdindex.sinks.base import SearchFilter
from tests.conftest import TinyEmbedder, build_indexer, run_backfill, settings_for, stored_points

STORES = ["client", "edge"]


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def two_roots(tmp_path: Path) -> tuple[Path, Path]:
    docs, notes = tmp_path / "docs", tmp_path / "notes"
    write(
        docs,
        "api/auth.md",
        "---\ntags: [api, release]\n---\n# Auth\n\nTokens expire after an hour.\n",
    )
    write(docs, "api/limits.md", "---\ntags: api\nweight: 3\n---\n# Limits\n\nTokens per minute.\n")
    write(docs, "guide/start.md", "---\ndraft: true\n---\n# Start\n\nTokens are created here.\n")
    write(notes, "todo.md", "# Todo\n\nRotate the tokens. #Ops/Keys #urgent\n")
    return docs, notes


def paths(hits: list[dict[str, Any]]) -> list[str]:
    return sorted(f"{h['root']}:{h['doc_path']}" for h in hits)


@pytest.mark.parametrize("store", STORES)
def test_filters_run_inside_the_engine(tmp_path: Path, two_roots: tuple[Path, Path], store: str):
    docs, notes = two_roots
    s = settings_for(tmp_path, [docs, notes], store=store)
    run_backfill(s, TinyEmbedder())
    with build_indexer(s, TinyEmbedder()) as indexer:

        def ask(**kw: Any) -> list[str]:
            return paths(indexer.search(Query("tokens", k=10, **kw)))

        every = ask()
        assert len(every) == 4
        assert ask(roots=("notes",)) == ["notes:todo.md"]
        assert ask(roots=("notes", "docs")) == every
        assert ask(path="api/") == ["docs:api/auth.md", "docs:api/limits.md"]
        assert ask(path="./api/l") == ["docs:api/limits.md"]
        assert ask(path="*/start.md") == ["docs:guide/start.md"]
        assert ask(path="api/*.md", roots=("docs",)) == ask(path="api/")
        assert ask(where=(("tags", "release"),)) == ["docs:api/auth.md"]  # one item of a list
        assert ask(where=(("tags", "api"),)) == ["docs:api/auth.md", "docs:api/limits.md"]
        assert ask(where=(("weight", "3"),)) == ["docs:api/limits.md"]  # a number in YAML
        assert ask(where=(("draft", "true"),)) == ["docs:guide/start.md"]  # a boolean
        assert ask(where=(("tags", "api"), ("weight", "3"))) == ["docs:api/limits.md"]
        assert ask(where=(("tags", "nope"),)) == []
        for mode in ("dense", "sparse", "hybrid"):
            assert ask(mode=mode, path="api/", where=(("tags", "release"),)) == ["docs:api/auth.md"]
        # tags, from frontmatter or #inline, lowercased; a/b also matches a
        assert ask(tags=("release",)) == ["docs:api/auth.md"]
        assert ask(tags=("API",)) == ["docs:api/auth.md", "docs:api/limits.md"]
        assert ask(tags=("ops",)) == ask(tags=("#ops/keys",)) == ["notes:todo.md"]
        assert ask(tags=("ops", "urgent")) == ["notes:todo.md"]  # all must hold
        assert ask(tags=("ops/keys/x",)) == ask(tags=("api", "urgent")) == []
        for mode in ("dense", "sparse", "hybrid"):
            assert ask(mode=mode, tags=("api",), where=(("weight", "3"),)) == ["docs:api/limits.md"]
    stored = {p["doc_path"]: p for p in stored_points(s).values()}
    assert stored["todo.md"]["tags"] == ["ops", "ops/keys", "urgent"]
    assert stored["api/auth.md"]["tags"] == ["api", "release"]


@pytest.mark.parametrize("store", STORES)
def test_a_path_prefix_names_the_documents_under_it_from_the_state(
    tmp_path: Path, two_roots: tuple[Path, Path], store: str
) -> None:
    """On edge the engine finds them through its keyword index (a prefix alone
    is tested on every point its graph visits); where the state knows none of
    them, the prefix still finds what the store holds. qdrant-client's local
    mode keeps the prefix: it tests a named path against every point in Python."""
    docs, notes = two_roots
    s = settings_for(tmp_path, [docs, notes], store=store)
    run_backfill(s, TinyEmbedder())
    with build_indexer(s, TinyEmbedder()) as indexer:
        query = Query("tokens", k=10, path="api/")
        under = path_namer(indexer.state.path, s.storage)
        named = name_paths(query.store_filter(), under, [0.0] * 384)
        edge = ("api/auth.md", "api/limits.md")
        assert named.doc_paths == (edge if store == "edge" else ())
        assert named.path_prefix == "api/"
        assert paths(indexer.search(query)) == ["docs:api/auth.md", "docs:api/limits.md"]
        if under is None:
            assert store != "edge"
            return
        # named while they hold fewer points than the engine scans: 10,000 KB of
        # the query's vectors (6,666 of 384 floats, 2,500 of 1,024), 5,000 sparse
        six_thousand = lambda roots, prefix, most: ["a.md"] if most >= 6_000 else None  # noqa: E731
        where = query.store_filter()
        assert name_paths(where, six_thousand, [0.0] * 384).doc_paths == ("a.md",)
        assert name_paths(where, six_thousand, [0.0] * 1024).doc_paths == ()
        assert name_paths(where, six_thousand, None).doc_paths == ()
        assert under(("notes",), "api/", 100) is None  # none there
        assert under((), "api/", 1) is None  # past the scan threshold
        assert paths(indexer.search(query)) == ["docs:api/auth.md", "docs:api/limits.md"]
        with indexer.state.transaction() as db:  # the state forgets them
            db.execute("DELETE FROM points WHERE path LIKE 'api/%'")
        assert under((), "api/", 100) is None
        assert paths(indexer.search(query)) == ["docs:api/auth.md", "docs:api/limits.md"]


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"q": " "}, "empty"),
        ({"q": "x" * 5000}, "over 4096"),
        ({"q": "x", "k": 0}, "k must be 1 to 100"),
        ({"q": "x", "k": "many"}, "k must be a number, not 'many'"),
        ({"q": "x", "k": "+-5"}, r"k must be a number, not '\+-5'"),  # digits int() refuses
        ({"q": "x", "k": "²"}, "k must be a number, not '²'"),
        ({"q": "x", "k": True}, "k must be a number, not bool"),
        # the one checked conversion (mdindex.outside): finite, in range, whole
        ({"q": "x", "k": float("nan")}, "k must be 1 to 100, not nan"),
        ({"q": "x", "k": float("inf")}, "k must be 1 to 100, not inf"),
        ({"q": "x", "k": "1e309"}, "k must be 1 to 100, not inf"),
        ({"q": "x", "k": "NaN"}, "k must be 1 to 100, not nan"),
        ({"q": "x", "k": "1.5"}, "k must be a whole number, not 1.5"),
        ({"q": "x", "k": 2.5}, "k must be a whole number, not 2.5"),
        ({"q": "x", "k": 10**400}, "k must be 1 to 100, not a larger number"),
        ({"q": "x", "k": "9" * 5000}, "k must be a number, not '999"),
        ({"q": "x", "k": None}, "k must be a number, not null"),
        ({"q": "x", "mode": "fuzzy"}, "mode must be one of"),
        ({"q": "x", "fusion": "max"}, "fusion must be one of"),
        ({"q": "x", "where": "tags"}, "must be key=value"),
        ({"q": "x", "where": "bad key!=1"}, "must be a frontmatter field name"),
        ({"q": "x", "where": {"k": [1]}}, "a where value must be"),
        ({"q": "x", "root": 7}, "root must be a string"),
        ({"q": "x", "path": "a\x00b"}, "NUL"),
        ({"q": ["x"]}, "must be a string"),
        ({"q": "x", "where": [f"k{i}=v" for i in range(17)]}, "at most 16"),
        ({"q": "x", "tag": [f"t{i}" for i in range(17)]}, "at most 16 --tag"),
        ({"q": "x", "tag": "#/"}, "each 1 to 100 characters besides # and /"),
        ({"q": "x", "tag": "x" * 101}, "each 1 to 100 characters besides # and /"),
        ({"q": "x", "tag": {"a": 1}}, "tag must be a string or a list"),
        ({"q": "x", "tag": "a\x00"}, "NUL"),
        ({"q": "x", "lang": "klingon"}, "lang must be a language code"),
        ({"q": "x", "lang": ["en"]}, "lang must be a string"),
        ({"q": "x", "lang": "e\x00n"}, "lang must be a language code"),
    ],
)
def test_a_bad_parameter_gets_one_line_that_names_it(params: dict[str, Any], reason: str):
    with pytest.raises(ValueError, match=reason) as caught:
        Query.from_params(params)
    assert "\n" not in str(caught.value)


def test_parameters_as_the_api_and_tools_give_them() -> None:
    q = Query.from_params(
        {"q": "hi", "k": "7", "root": ["a", "b"], "path": "/docs/*.md", "where": ["tags=x"]}
        | {"tag": ["#Ops/"]},
        default_mode="dense",
    )
    assert (q.k, q.mode, q.roots, q.glob, q.tags) == (7, "dense", ("a", "b"), "docs/*.md", ("ops",))
    assert q.store_filter() == SearchFilter(("a", "b"), "docs/", (("tags", ("x",)),), ("ops",))
    assert parse_where({"draft": True, "weight": 3}) == (("draft", "true"), ("weight", "3"))
    assert Query("hi", path="guide").store_filter().path_prefix == "guide"
    assert Query("hi", lang="ZH-Hans").store_filter() == SearchFilter(lang="zh")
    # what the CLI and the MCP server send the daemon reads back as the same query
    sent = Query(
        "hi", k=3, mode="sparse", roots=("a",), where=(("t", "x"),), tags=("p", "q/r"),
        per_section=False, lang="zh",
    )  # fmt: skip
    back: dict[str, Any] = {}
    for key, value in sent.as_params():
        back.setdefault(key, []).append(value)
    read = {k: v if k in ("root", "where", "tag") else v[0] for k, v in back.items()}
    assert Query.from_params(read) == sent


@pytest.mark.model
@pytest.mark.parametrize("store", STORES)
def test_hybrid_finds_a_rare_identifier_that_dense_misses(tmp_path: Path, store: str) -> None:
    """The real model ranks documents about modes above the one page that names
    the key; BM25 knows the key, and fusion in the engine keeps that page first."""
    root = tmp_path / "docs"
    write(
        root,
        "modes.md",
        "# Modes\n\nEach mode setting changes how the tool behaves. Pick a "
        "mode in the settings file; the default mode suits most users.\n",
    )
    write(
        root,
        "reference.md",
        "# Mode reference\n\nWhat each mode does: the quiet mode logs "
        "less, the fast mode skips checks, and the safe mode asks before it deletes anything.\n",
    )
    write(
        root,
        "flags.md",
        "# Flags\n\nCommand-line flags override the settings file. A flag's "
        "mode wins over the file's mode.\n",
    )
    write(
        root,
        "garden.md",
        "---\ntags: [greenhouse]\n---\n# Garden notes\n\n"
        "Tomatoes want sun and steady water; mulch keeps "
        "the soil moist through July. Stake the plants early, before the stems lean, and tie "
        "them loosely with soft twine. Feed them with compost tea every second week, and water "
        "at the roots in the morning so the leaves dry by noon. When the plants flower, set "
        "`zorblat_mode` to two in the greenhouse controller. Pinch the side shoots so the fruit "
        "ripens, pick the tomatoes when they are fully red, and save seeds from the best plants "
        "for next spring.\n",
    )
    s = settings_for(tmp_path, [root], store=store)
    models = make_models(s)
    with build_indexer(s, models.embedder) as indexer:
        indexer.backfill()
        store_ = indexer.store
        assert store_.has_sparse

        def top(mode: str, **filters: Any) -> str:
            hits = search(
                models.embedder,
                models.planner.sparse,
                store_,
                Query("what does zorblat_mode do", k=3, mode=mode, **filters),
            )
            return str(hits[0]["doc_path"])

        assert top("dense") != "garden.md"
        assert top("sparse") == "garden.md"
        assert top("hybrid") == "garden.md"
        # filters hold in every mode, with the real model too
        for mode in ("dense", "sparse", "hybrid"):
            assert top(mode, where=(("tags", "greenhouse"),)) == "garden.md"
            assert top(mode, path="flags") == "flags.md"
            assert top(mode, path="*s.md", roots=("docs",)) in ("modes.md", "flags.md")
        # and the default mode of the settings is the hybrid one
        assert s.search_mode == "hybrid"


@pytest.mark.model
@pytest.mark.parametrize("store", STORES)
def test_a_question_that_names_a_heading_finds_that_section_first(
    tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three pages talk about starting the server; one section is called
    Startup and says little. The real model ranks the talk first and the
    engine's fusion leaves the section out of the top three; a reader who types
    the heading gets it first, with the engine's own score."""
    root = tmp_path / "docs"
    write(
        root,
        "server.md",
        "# Server\n\n## Startup\n\nThe daemon reads its settings file, opens the store and "
        "starts the watcher.\n\n## Logging\n\nLogs go to the journal; raise the level with "
        "--verbose for more detail.\n",
    )
    write(
        root,
        "errors.md",
        "# Errors\n\nWhen the server fails to start, check that the port is free and the "
        "settings file parses. Startup errors are printed before the server exits, and the "
        "exit code names the failure. A server that starts but serves no requests usually has "
        "a firewall in front of it.\n",
    )
    write(
        root,
        "deploy.md",
        "# Deploying\n\nTo start the server at boot, enable the unit; the server startup then "
        "waits for the network. Restarting the server re-reads its settings.\n",
    )
    write(
        root,
        "tuning.md",
        "# Tuning\n\nA faster server startup comes from a smaller index: startup time grows "
        "with the number of points the server loads.\n",
    )
    s = settings_for(tmp_path, [root], store=store)
    models = make_models(s)
    with build_indexer(s, models.embedder) as indexer:
        indexer.backfill()

        def hits(text: str, mode: str) -> list[dict[str, Any]]:
            query = Query(text, k=3, mode=mode)
            return search(models.embedder, models.planner.sparse, indexer.store, query)

        for text in ("Server Startup", "startup", "server: startup!"):
            dense = hits(text, "dense")
            assert dense[0]["heading_path"] != ["Server", "Startup"]
            hybrid = hits(text, "hybrid")
            assert hybrid[0]["doc_path"] == "server.md"
            assert hybrid[0]["heading_path"] == ["Server", "Startup"]
            assert hybrid[0]["text"].startswith("## Startup")
            # the engine's fusion ranked it below the next: the heading put it first
            assert hybrid[0]["score"] < hybrid[1]["score"]
        # words of the section, not its heading, are ranked as the engine ranks them
        ranked = hits("server startup time", "hybrid")
        assert [h["score"] for h in ranked] == sorted((h["score"] for h in ranked), reverse=True)

    # the CLI says why a hit is above a better score, and names the whole path
    from tests.cli_helper import in_process

    out = in_process(capsys, "search", "Startup", "--state-dir", str(tmp_path / "state"),
                     "--store", store, "-k", "2").stdout.splitlines()  # fmt: skip
    assert out[0].endswith("server.md:3-5  Server › Startup  (its heading)"), out
    assert "(its heading)" not in out[2]
    dense = in_process(capsys, "search", "Startup", "--mode", "dense", "--state-dir",
                       str(tmp_path / "state"), "--store", store).stdout  # fmt: skip
    assert "(its heading)" not in dense


@pytest.mark.slow
@pytest.mark.model
def test_the_cli_searches_with_mode_and_filters(
    tmp_path: Path, two_roots: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
):
    import json
    import subprocess

    from tests.cli_helper import in_process

    docs, notes = two_roots
    state = ["--state-dir", str(tmp_path / "state")]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:  # its output: main() here
        return in_process(capsys, *args, *state)

    assert cli("backfill", str(docs), str(notes)).returncode == 0
    done = cli(
        "search",
        "tokens",
        "--json",
        "--mode",
        "sparse",
        "--path",
        "api/",
        "--where",
        "tags=release",
    )
    assert done.returncode == 0, done.stderr
    assert [h["doc_path"] for h in json.loads(done.stdout)] == ["api/auth.md"]
    done = cli("search", "tokens", "--json", "--root", "notes", "-k", "10")
    assert [h["doc_path"] for h in json.loads(done.stdout)] == ["todo.md"]
    done = cli("search", "tokens", "--json", "--tag", "api", "--tag", "Release", "-k", "10")
    assert [h["doc_path"] for h in json.loads(done.stdout)] == ["api/auth.md"]
    bad = cli("search", "tokens", "--where", "tags")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].endswith("must be key=value")
    assert make_store(settings_for(tmp_path, [docs])).open().has_sparse


@pytest.mark.parametrize("store", STORES)
def test_a_long_section_answers_with_its_passages_joined(tmp_path: Path, store: str) -> None:
    root = tmp_path / "docs"
    long = " ".join(f"Otters sleep holding paws, fact {i}." for i in range(40))
    text = f"# Otters\n\n## Sleep\n\n{long}\n\n## Food\n\nOtters eat fish.\n"
    write(root, "otters.md", text)
    write(root, "plain.md", f"{long}\n")  # no headings: its windows are never joined
    s = settings_for(tmp_path, [root], store=store, max_tokens=48, overlap_tokens=8)
    run_backfill(s, TinyEmbedder())
    with build_indexer(s, TinyEmbedder()) as indexer:
        every = indexer.search(Query("otters sleep holding paws", k=50, per_section=False))
        sections = [(h["doc_path"], tuple(h["heading_path"])) for h in every]
        assert sections.count(("otters.md", ("Otters", "Sleep"))) > 2
        kept = indexer.search(Query("otters sleep holding paws", k=50))
        sleep = [h for h in kept if h["heading_path"] == ["Otters", "Sleep"]]
        # its windows overlap one another: one passage, the whole run of them
        assert len(sleep) == 1
        windows = [h for h in every if h["heading_path"] == ["Otters", "Sleep"]]
        assert sleep[0]["char_start"] == min(h["char_start"] for h in windows)
        assert sleep[0]["char_end"] == max(h["char_end"] for h in windows)
        assert sleep[0]["text"] == text[sleep[0]["char_start"] : sleep[0]["char_end"]]
        assert sleep[0]["score"] == pytest.approx(max(h["score"] for h in windows), abs=1e-6)
        assert [h["doc_path"] for h in kept].count("plain.md") == sections.count(("plain.md", ()))
        assert [h["score"] for h in kept] == sorted((h["score"] for h in kept), reverse=True)


TOPICS = [
    "Sourdough bread rises slowly because wild yeast ferments the dough overnight.",
    "Volcanoes erupt when magma pressure breaks through the crust of the mountain.",
    "A violin has four strings tuned in fifths and is played with a horsehair bow.",
    "Honeybees dance in a figure eight to tell the hive where the flowers are.",
    "Glaciers carve U-shaped valleys as the ice slowly grinds over the bedrock.",
    "Chess openings such as the Sicilian Defence fight for the centre of the board.",
    "Lighthouses warned ships of rocks with a rotating lamp and a Fresnel lens.",
    "Tomatoes ripen faster when stored next to bananas, which give off ethylene gas.",
    "The marathon is 42.195 kilometres long, a distance fixed at the 1908 Olympics.",
    "Penguins huddle together in Antarctic winter storms to keep their eggs warm.",
    "Espresso is brewed by forcing hot water through finely ground coffee beans.",
    "Tides rise and fall twice a day because of the pull of the moon's gravity.",
    "Origami folds a single square sheet of paper into cranes without any glue.",
    "Submarines dive by flooding ballast tanks with seawater to lose buoyancy.",
    "Cacti store water in thick stems and grow spines instead of broad leaves.",
    "A solar eclipse happens when the moon passes between the earth and the sun.",
    "Blacksmiths heat iron in a forge until it glows before hammering it into shape.",
    "Owls hunt at night, turning their heads almost all the way round to listen.",
    "Silk is spun by silkworms, which wrap themselves in a cocoon of one long thread.",
    "The Great Wall of China was built over centuries to guard the northern border.",
]
QUESTIONS = [
    "how does wild yeast make bread rise",
    "why do volcanoes erupt",
    "how many strings does a violin have",
    "how do bees tell each other where flowers are",
    "what shape of valley do glaciers make",
    "what is the Sicilian Defence",
    "what lens did lighthouses use",
    "why do tomatoes ripen near bananas",
    "how long is a marathon",
    "how do penguins survive winter storms",
    "how is espresso brewed",
    "what causes the tides",
    "folding paper cranes",
    "how does a submarine dive",
    "how do cacti store water",
    "what is a solar eclipse",
    "how does a blacksmith shape iron",
    "how do owls hunt at night",
    "where does silk come from",
    "why was the Great Wall of China built",
]


@pytest.mark.model
def test_one_heading_twenty_windows_each_question_finds_its_own(tmp_path: Path) -> None:
    """One section of twenty windows on twenty topics, beside five short notes
    on some of the same topics. A question aimed at two windows finds both in
    its top five about as often as with every window kept; one hit per
    section (the rule before passages) could find at most one of the two."""
    root = tmp_path / "docs"
    body = "# Facts\n\n" + "\n\n".join(t * 3 for t in TOPICS) + "\n"
    write(root, "facts.md", body)
    for i in range(5):
        write(root, f"other{i}.md", f"# Note {i}\n\n{TOPICS[i * 4]}\n")
    s = settings_for(tmp_path, [root], max_tokens=80, overlap_tokens=0)
    models = make_models(s)
    run_backfill(s, models.embedder)
    store = make_store(s).open()
    found = {True: 0, False: 0}
    try:
        for i in range(10):
            aimed = [body.index(TOPICS[i] * 3), body.index(TOPICS[i + 10] * 3)]
            question = f"{QUESTIONS[i]}, and {QUESTIONS[i + 10]}"
            for per_section in (True, False):
                hits = search(
                    models.embedder,
                    models.planner.sparse,
                    store,
                    Query(question, k=5, per_section=per_section),
                )
                facts = [h for h in hits if h["doc_path"] == "facts.md"]
                found[per_section] += sum(
                    any(h["char_start"] <= at < h["char_end"] for h in facts) for at in aimed
                )
                if per_section:
                    assert len(facts) <= MAX_PASSAGES
                    for h in facts:
                        assert h["text"] == body[h["char_start"] : h["char_end"]]
    finally:
        store.close()
    # 20 windows aimed at; one hit per section could have found 10 at most
    assert found[True] >= found[False] - 1 and found[True] >= 16, found


def test_a_lone_surrogate_is_refused_in_one_line() -> None:
    """Found by the hostile review: an MCP tool call with a lone surrogate in an
    argument was never answered (its error could not be written as UTF-8)."""
    with pytest.raises(ValueError, match="not valid Unicode"):
        Query("otters \ud800")
    with pytest.raises(ValueError, match="not valid Unicode"):
        Query.from_params({"q": "otters", "path": "a\udcffb"})


ZH_NOTE = (
    "# 部署指南\n\n我们使用容器部署服务。首先安装依赖，然后配置数据库连接，"
    "最后启动服务器并检查日志。\n"
)
EN_NOTE = "# Deployment guide\n\nWe deploy the service in containers. Install, configure, start.\n"
RU_NOTE = "# Руководство\n\nМы разворачиваем сервис в контейнерах и проверяем журналы сервера.\n"


@pytest.mark.parametrize("store", STORES)
def test_lang_filters_inside_the_engine(tmp_path: Path, store: str) -> None:
    root = tmp_path / "notes"
    write(root, "zh.md", ZH_NOTE)
    write(root, "en.md", EN_NOTE)
    write(root, "ru.md", RU_NOTE)
    write(root, "de.md", "---\nlang: de\n---\n# Notiz\n\nWe deploy containers.\n")
    s = settings_for(tmp_path, [root], store=store)
    run_backfill(s, TinyEmbedder())
    stored = {p["doc_path"]: p["lang"] for p in stored_points(s).values()}
    assert stored == {"zh.md": "zh", "en.md": "en", "ru.md": "ru", "de.md": "de"}
    with build_indexer(s, TinyEmbedder()) as indexer:
        for mode in ("dense", "sparse", "hybrid"):

            def ask(lang: str, text: str = "deploy 部署 сервис", mode: str = mode) -> list[str]:
                hits = indexer.search(Query(text, k=10, mode=mode, lang=lang))
                return sorted(h["doc_path"] for h in hits)

            assert ask("zh") == ["zh.md"]
            assert ask("ru") == ["ru.md"]
            assert ask("de") == ["de.md"] and ask("en") == ["en.md"]
            assert ask("fr") == []


def test_a_mixed_vault_answers_each_language_with_the_real_model(
    tmp_path: Path, real_embedder: Any
) -> None:
    """Backfill a vault of Chinese, English and Russian notes with the real model,
    then ask in each language: each finds its own note first, in every mode that
    reads text (the default model knows little Chinese; BM25 does the work)."""
    root = tmp_path / "vault"
    write(root, "zh/部署.md", ZH_NOTE)
    write(root, "zh/会议.md", "# 会议记录\n\n今天的会议讨论了预算和招聘计划，下周继续。\n")
    write(root, "en/deploy.md", EN_NOTE)
    write(root, "en/budget.md", "# Budget\n\nThe meeting discussed the budget and hiring.\n")
    write(root, "ru/сервер.md", RU_NOTE)
    s = settings_for(tmp_path, [root])
    summary = run_backfill(s, real_embedder)
    # backfill --json and status say which languages the vault holds and the model reads
    assert summary["languages"] == {"en": 2, "zh": 2, "ru": 1}
    assert summary["model_languages"] == ["en"]
    status = offline_status(s)
    assert (status["languages"], status["model_languages"]) == ({"en": 2, "zh": 2, "ru": 1}, ["en"])
    stored = {p["doc_path"]: p for p in stored_points(s).values()}
    assert {k: v["lang"] for k, v in stored.items()} == {
        "zh/部署.md": "zh", "zh/会议.md": "zh", "en/deploy.md": "en",
        "en/budget.md": "en", "ru/сервер.md": "ru",
    }  # fmt: skip
    with build_indexer(s, real_embedder) as indexer:
        for mode in ("sparse", "hybrid"):

            def first(text: str, mode: str = mode) -> str:
                return str(indexer.search(Query(text, k=3, mode=mode))[0]["doc_path"])

            assert first("如何配置数据库连接") == "zh/部署.md"
            assert first("招聘计划") == "zh/会议.md"
            assert first("how do we deploy the service") == "en/deploy.md"
            assert first("hiring budget") == "en/budget.md"
            assert first("журнал сервера") == "ru/сервер.md"  # a form the note lacks


@pytest.mark.parametrize("store", STORES)
def test_hybrid_leaves_out_a_model_that_cannot_read_the_question(
    tmp_path: Path, store: str
) -> None:
    root = tmp_path / "notes"
    write(root, "zh.md", ZH_NOTE)
    write(root, "en.md", EN_NOTE)
    write(root, "more.md", "# 预算\n\n今天的会议讨论了预算和招聘计划，下周继续部署。\n")
    s = settings_for(tmp_path, [root], store=store)
    run_backfill(s, TinyEmbedder())
    models = make_models(s)
    scored = make_store(s).open()
    try:

        def ask(text: str, mode: str, languages: tuple[str, ...]) -> list[tuple[str, float]]:
            query = Query(text, k=5, mode=mode)
            hits = search(TinyEmbedder(), models.planner.sparse, scored, query, "", languages)
            return [(h["doc_path"], round(h["score"], 6)) for h in hits]

        zh, en = "如何部署服务", "how do we deploy the service"
        # the default model reads English only: a Chinese question is BM25's alone
        assert models.planner.model_languages == ("en",)
        assert ask(zh, "hybrid", ("en",)) == ask(zh, "sparse", ("en",))
        assert ask(zh, "hybrid", ("*",)) != ask(zh, "sparse", ("*",))  # fused
        assert ask(zh, "hybrid", ("zh",)) == ask(zh, "hybrid", ("*",))
        assert ask(en, "hybrid", ("en",)) == ask(en, "hybrid", ("*",)) != ask(en, "sparse", ("*",))
        assert ask(zh, "dense", ("en",)) == ask(zh, "dense", ("*",))  # asked for: kept
        # too short to detect: the script decides for an English model
        assert ask("部署", "hybrid", ("en",)) == ask("部署", "sparse", ("en",))
        assert ask("deploy", "hybrid", ("en",)) == ask("deploy", "hybrid", ("*",))
    finally:
        scored.close()


@pytest.mark.parametrize("store", STORES)
def test_a_zero_width_space_inside_words_hides_no_note_from_sparse_search(
    tmp_path: Path, store: str
) -> None:
    """Issue 33, found by a hostile review: U+200B inside a word (pasted from
    the web, or between Chinese words) hid the note from a sparse search for
    the word. Only the analysis drops it: the stored text keeps every character."""
    root = tmp_path / "notes"
    zw = "\u200b"
    zh = f"# 火山\n\n火山喷发时熔{zw}岩流入大{zw}海，渔民看{zw}见了。\n"
    en = f"# Volcano\n\nThe vol{zw}cano erupted{zw} and la\u2060va reached the sea.\n"
    write(root, "zh.md", zh)
    write(root, "en.md", en)
    write(root, "clean.md", "# Chess\n\nThe knight forks the rook and the queen.\n")
    s = settings_for(tmp_path, [root], store=store)
    run_backfill(s, TinyEmbedder())
    texts = {"zh.md": zh, "en.md": en}
    for p in stored_points(s).values():
        if p["doc_path"] in texts:  # offsets and text as the file has them, U+200B kept
            assert texts[p["doc_path"]][p["char_start"] : p["char_end"]] == p["text"]
    assert any(zw in p["text"] for p in stored_points(s).values())
    with build_indexer(s, TinyEmbedder()) as indexer:

        def ask(text: str) -> list[str]:
            return [h["doc_path"] for h in indexer.search(Query(text, k=3, mode="sparse"))]

        assert ask("熔岩")[:1] == ["zh.md"] and ask("大海")[:1] == ["zh.md"]
        assert ask("volcano")[:1] == ["en.md"] and ask("lava")[:1] == ["en.md"]
        assert ask(f"kni{zw}ght")[:1] == ["clean.md"]  # a query holding one finds the clean note
        assert ask("\u202equeen\u202c")[:1] == ["clean.md"]
