"""The flags: never abbreviated, never swallowing a root, checked where they enter."""

from __future__ import annotations

import pytest

from mdindex.cli import main
from mdindex.cli.parser import build_parser


def test_flags_are_never_abbreviated_nor_swallow_a_root(capsys: pytest.CaptureFixture[str]) -> None:
    # `--mod` is neither `--model` nor `--mode`: an unknown flag is a usage error
    with pytest.raises(SystemExit) as exc:
        main(["search", "--mod", "hybrid", "some query"])
    assert exc.value.code == 2 and "unrecognized arguments: --mod" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["backfill", "--dry", "docs"])
    assert exc.value.code == 2
    # `--ray` is a flag; the cluster is `--ray-address`
    args = build_parser().parse_args(["backfill", "--ray", "docs"])
    assert args.ray is True and args.roots == ["docs"] and args.ray_address is None
    args = build_parser().parse_args(["backfill", "--ray", "--ray-address", "ray://h:10001", "d"])
    assert args.ray_address == "ray://h:10001" and args.roots == ["d"]
    with pytest.raises(SystemExit) as exc:
        main(["status", "--wait", "--timeout", "-1"])
    assert exc.value.code == 2 and "--timeout" in capsys.readouterr().err
