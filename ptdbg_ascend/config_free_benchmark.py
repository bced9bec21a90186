"""The ``free_benchmark`` section of a msprobe 1.0.4 ``config.json``, validated (``config.py`` calls it).

Keys and defaults are 1.0.4's: ``scope`` (exact call names such as ``Torch.matmul.0.forward``, any number) or
``list`` (substrings), not both; ``fuzz_device`` "npu" (the device the call ran on) or "cpu";
``pert_mode`` "improve_precision" (default), "add_noise", "bit_noise", "change_value", "no_change", "to_cpu";
``handler_type`` "check" (default) or "fix"; ``fuzz_level`` "L1"; ``fuzz_stage`` "forward" (default) or
"backward"; ``if_preheat`` (default false), ``preheat_step`` (15), ``max_sample`` (20).

What 1.0.4 found only at run time (or never) is an error here, naming the key:

* ``to_cpu`` needs ``fuzz_device: "cpu"`` and ``fuzz_device: "cpu"`` needs ``to_cpu`` (1.0.4: an exception at the
  first perturbed call);
* ``fix`` only with ``improve_precision`` or ``to_cpu``, only at ``fuzz_stage: "forward"``, never with preheating
  (1.0.4's own rules);
* ``preheat_step`` and ``max_sample`` are integers >= 1 (1.0.4 checked only ``preheat_step != 0``);
* the top-level ``level`` must be "L1": the check perturbs API calls.

One 1.0.4 quirk is fixed: ``if_preheat`` absent means false, as its documentation and its default config say
(1.0.4's code turned an absent key into true, so a config without it skipped step 0 and re-ran every sampled
call on the CPU for 15 steps).

This module never imports torch.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Tuple

from ptdbg_ascend.errors import ParameterError

PERT_MODES = ("improve_precision", "add_noise", "bit_noise", "change_value", "no_change", "to_cpu")
FIX_MODES = ("improve_precision", "to_cpu")
HANDLER_TYPES = ("check", "fix")
FUZZ_DEVICES = ("npu", "cpu")
FUZZ_LEVELS = ("L1",)
FUZZ_STAGES = ("forward", "backward")
SECTION_KEYS = ("scope", "list", "fuzz_device", "pert_mode", "handler_type", "fuzz_level", "fuzz_stage",
                "if_preheat", "preheat_step", "max_sample")
DEFAULTS: Dict[str, Any] = {"fuzz_device": "npu", "pert_mode": "improve_precision", "handler_type": "check",
                            "fuzz_level": "L1", "fuzz_stage": "forward", "if_preheat": False, "preheat_step": 15,
                            "max_sample": 20}
PREFIX = "free_benchmark."


def free_benchmark_section(section: Mapping[str, Any], level: str, choice: Callable[[str, Any, Tuple[str, ...]], str],
                           str_list: Callable[[str, Any], Tuple[str, ...]]) -> Dict[str, Any]:
    """The DebuggerConfig values of a ``free_benchmark`` section (``scope``, ``api_list`` and the keys of
    :data:`DEFAULTS`); ``choice``/``str_list`` are config.py's checks, so every message has one form."""
    if level != "L1":
        raise ParameterError("level", level, "must be 'L1' for task free_benchmark",
                             "free_benchmark perturbs API calls (level L1); modules are not perturbed.")
    scope = str_list(PREFIX + "scope", section.get("scope", []))
    api_list = str_list(PREFIX + "list", section.get("list", []))
    if scope and api_list:
        raise ParameterError(PREFIX + "scope", list(scope), "must be empty when free_benchmark.list is given",
                             "1.0.4: 'Scope and api_list conflict'. Name the calls exactly (scope) or by substring "
                             "(list), not both.")
    for name in scope:
        if name.startswith("Module"):
            raise ParameterError(PREFIX + "scope", list(scope), "must name API calls (e.g. 'Torch.matmul.0.forward'), "
                                 "not modules")
    values: Dict[str, Any] = {"scope": scope, "api_list": api_list}
    for key, allowed in (("fuzz_device", FUZZ_DEVICES), ("pert_mode", PERT_MODES), ("handler_type", HANDLER_TYPES),
                         ("fuzz_level", FUZZ_LEVELS), ("fuzz_stage", FUZZ_STAGES)):
        values[key] = choice(PREFIX + key, section.get(key, DEFAULTS[key]), allowed)
    preheat = section.get("if_preheat", False)
    if not isinstance(preheat, bool):
        raise ParameterError(PREFIX + "if_preheat", preheat, "must be a boolean (true or false)")
    values["if_preheat"] = preheat
    for key in ("preheat_step", "max_sample"):
        number = section.get(key, DEFAULTS[key])
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise ParameterError(PREFIX + key, number, "must be an integer >= 1")
        values[key] = number
    _check_combination(values)
    return values


def _check_combination(values: Mapping[str, Any]) -> None:
    mode, device, handler = values["pert_mode"], values["fuzz_device"], values["handler_type"]
    if (mode == "to_cpu") != (device == "cpu"):
        raise ParameterError(PREFIX + "fuzz_device", device,
                             "must be 'cpu' with pert_mode 'to_cpu', and 'npu' with every other pert_mode",
                             f"pert_mode is {mode!r}.")
    if handler == "fix":
        if mode not in FIX_MODES:
            raise ParameterError(PREFIX + "pert_mode", mode, f"must be one of {list(FIX_MODES)} with handler_type 'fix'",
                                 "fix replaces an output with a more accurate one; noise would make it worse.")
        if values["fuzz_stage"] != "forward":
            raise ParameterError(PREFIX + "fuzz_stage", values["fuzz_stage"], "must be 'forward' with handler_type "
                                 "'fix' (a fixed forward also fixes what its backward computes from it)")
        if values["if_preheat"]:
            raise ParameterError(PREFIX + "if_preheat", True, "must be false with handler_type 'fix'",
                                 "1.0.4: 'Preheating is not supported in fix handler type'.")


def section_dict(config: Any) -> Dict[str, Any]:
    """The ``free_benchmark`` section of ``config`` (a DebuggerConfig) in the ``config.json`` form."""
    section: Dict[str, Any] = {"scope": list(config.scope), "list": list(config.api_list)}
    for key in DEFAULTS:
        section[key] = getattr(config, key)
    return section
