"""A document's language: frontmatter first, else detected from its prose alone;
unknown rather than wrong on English that is too short to tell."""

from __future__ import annotations

import json
import os
import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mdindex.documents.language import detect, detect_many, normal_code, prose
from mdindex.documents.parsing import parse_document

CODE = "```python\nimport os\nfor name in os.listdir('.'):\n    print(name.upper())\n```\n"
ZH = "我们在周末整理了项目的笔记，并且讨论了下一步的计划和需要完成的工作。"
RU = "Мы собрали заметки о проекте и обсудили, что нужно сделать на следующей неделе."


def lang_of(text: str, setting: str = "auto") -> tuple[str, list[str]]:
    doc = parse_document(text, "note.md", language=setting)
    return doc.lang, doc.warnings


def test_prose_decides_not_code_nor_links() -> None:
    note = f"# 计划\n\n{ZH}\n\n{CODE * 4}\n见 [说明](https://example.com/setup-guide-for-the-project).\n"
    assert lang_of(note) == ("zh", [])
    text = prose(parse_document(note, "note.md"))
    assert "import os" not in text and "example.com" not in text and ZH in text
    assert lang_of(f"{RU}\n\n{CODE * 4}")[0] == "ru"
    assert lang_of(f"# Setup\n\nInstall it with pip and run the server.\n\n{CODE}")[0] == "en"


def test_a_note_with_english_terms_keeps_its_language() -> None:
    mixed = "我们用 Docker Compose 部署了 API server，然后在 README 里写下了配置 JSON 的步骤。"
    assert lang_of(mixed)[0] == "zh"
    assert (
        lang_of("Мы развернули Kubernetes и настроили pull request в репозитории проекта.")[0]
        == "ru"
    )


def test_short_or_unsure_english_is_unknown_never_another_language() -> None:
    # each read as Catalan, French, Tswana... by the detector alone
    for text in (
        "A _remote resource_ is a file on a remote server, accessible via HTTP or HTTPS.",
        "See [Unix epoch][].",
        "To sort in descending order:",
        "# Notes",
        "",
        CODE,
    ):
        assert lang_of(text)[0] in ("en", ""), text


def test_frontmatter_wins_and_the_setting_stands_in_for_detection() -> None:
    assert lang_of(f"---\nlang: de\n---\n{ZH}") == ("de", [])
    assert lang_of("---\nlanguage: zh-Hans\n---\nHello there, this is English.")[0] == "zh"
    assert lang_of(f"---\nlang: English\n---\n{ZH}")[0] == "en"
    assert lang_of("Hello there, this is a note.", setting="fr")[0] == "fr"
    assert lang_of("---\nlang: ru\n---\nHello there.", setting="fr")[0] == "ru"


def test_hostile_frontmatter_gets_one_line_and_detection() -> None:
    for value in ("klingon", "[1, 2]", "{a: b}", "12", "''", "x" * 500, "'\\u0000en'", "null"):
        lang, warnings = lang_of(f"---\nlang: {value}\n---\n{ZH}")
        assert lang == "zh", value
        (warning,) = [w for w in warnings if "lang" in w]
        assert "not a language code" in warning and "\n" not in warning and len(warning) < 120


def test_codes_and_names_are_normalised() -> None:
    assert normal_code("EN") == normal_code("en-US") == normal_code("english") == "en"
    assert normal_code("pt_BR") == "pt" and normal_code(" zh ") == "zh"
    assert normal_code("xx") is None and normal_code("") is None and normal_code("e" * 40) is None


def test_a_question_is_detected_when_short() -> None:
    assert detect("项目计划", min_weight=6) == "zh" and detect("项目计划") == "zh"
    assert detect("как настроить сервер", min_weight=6) == "ru"
    assert detect("12345 !!!", min_weight=6) == ""
    assert detect("how do I set the token limit for the streaming API") == "en"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_detection_never_fails_on_any_text(text: str) -> None:
    assert isinstance(detect(text), str)
    assert len(detect(text, min_weight=0)) in (0, 2)
    doc = parse_document(f"---\nlang: {text[:20]!r}\n---\n{text}", "n.md")
    assert doc.lang == "" or len(doc.lang) == 2


SAMPLES = [
    ZH,
    RU,
    "Wir haben am Wochenende die Notizen zum Projekt geordnet und die nächsten Schritte geplant.",
    "Nous avons rangé les notes du projet ce week-end et discuté des prochaines étapes à suivre.",
    "قمنا بترتيب ملاحظات المشروع في نهاية الأسبوع وناقشنا الخطوات التالية التي يجب إنجازها.",
    "เราจัดระเบียบบันทึกของโครงการในช่วงสุดสัปดาห์และพูดคุยถึงขั้นตอนต่อไป",
    "We tidied the project's notes over the weekend and talked about what comes next.",
    "A _remote resource_ is a file on a remote server",  # unsure: "", never Catalan
    "See [Unix epoch][].",  # too short: ""
    "",
    "x" * 5000,
    RU * 60,  # past PREFIX_CHARS
]


def test_many_texts_at_once_get_what_each_gets_alone() -> None:
    """The batch a group of documents is detected in (``detect_many``) answers
    as ``detect`` does, text by text, in order."""
    assert detect_many(SAMPLES) == [detect(text) for text in SAMPLES]
    assert detect_many(SAMPLES)[:7] == ["zh", "ru", "de", "fr", "ar", "th", "en"]
    assert detect_many([]) == []


def test_a_fork_detects_after_its_parent_did() -> None:
    """The detector's threads are not copied into a forked child, where a call
    that waited for them hung (the crash tests fork children that index)."""
    detect_many(SAMPLES)  # the parent's threads start
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answers, or is killed by the alarm
        signal.alarm(20)
        os.write(write, json.dumps(detect_many(SAMPLES)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        got = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert json.loads(got) == detect_many(SAMPLES)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=8))
def test_many_generated_texts_at_once_get_what_each_gets_alone(texts: list[str]) -> None:
    assert detect_many(texts) == [detect(text) for text in texts]


@pytest.mark.parametrize(
    "value", ["9" * 4000, "-" + "9" * 4000, "1e400", "x" * 4000, "[" + "9" * 4000 + "]"]
)
def test_a_huge_frontmatter_language_is_quoted_in_at_most_a_line(value: str) -> None:
    """Every surface quotes at most ~80 characters of a hostile value."""
    doc = parse_document(f"---\nlang: {value}\n---\n# T\n\nSome words here.\n", "a.md")
    assert any("lang" in w for w in doc.warnings), doc.warnings
    assert all(len(w) < 200 and "\n" not in w for w in doc.warnings), doc.warnings
