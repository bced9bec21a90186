"""A legacy dump of a model's training, read back: the pkl lines of one ``set_dump_switch`` window."""

from __future__ import annotations

from typing import Any, Callable, List

from ptdbg_ascend import acc_cmp_dump, register_hook, set_dump_path, set_dump_switch


def legacy_pkl_lines(tmp_path: Any, model: Any, train: Callable[[Any], None], tag: str, **switch: Any) -> List[str]:
    """Dump ``train(model)`` under ``{tmp_path}/{tag}`` with ``set_dump_switch("ON", **switch)``; its pkl's lines."""
    set_dump_path(str(tmp_path / tag / "npu_dump.pkl"), dump_tag=tag)
    register_hook(model, acc_cmp_dump)
    set_dump_switch("ON", **switch)
    train(model)
    set_dump_switch("OFF")
    pkl = next((tmp_path / tag / f"{tag}_v1.0" / "rank0").glob("*.pkl"))
    return pkl.read_text(encoding="utf-8").splitlines()
