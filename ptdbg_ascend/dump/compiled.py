"""``torch.compile``: the wrappers step aside for compiled code.

Compiled code does not call the torch APIs one by one (inductor fuses them into kernels), so there is
nothing per API to dump inside it; what the tool must do is stay out of the compiler's way and keep
dumping the eager code around it (the loss, the backward of eager parts, the optimizer step).

* Tracing. Every wrapper carries ``_torchdynamo_inline = original`` (set in ``interception.py``): the
  attribute torch's own wrappers (``torch.jit.script``, ``torch.compile``) use to tell dynamo "trace
  this instead". Dynamo then traces the original API, never the wrapper's body: the graph is the one
  built without the tool — no graph break, no guard on our counters or thread flags, so no recompile.
  (``torch.compiler.disable`` on the wrapper would break the graph at every API; ``allow_in_graph``
  would put the wrapper itself in the graph, called on fake tensors at compile time and on real ones
  in the compiled code; skipping our file in ``trace_rules`` breaks the graph too; letting dynamo
  inline the wrapper guards on the counter values and recompiles at every call.)
* Compile time. Dynamo (and AOTAutograd, inductor) still call tensor methods on fake tensors while
  they compile. Dynamo's compile callbacks mark the compiling thread as "inside a wrapped API" for the
  whole compilation (:func:`install`), so those calls pass through the wrapper's first check: they
  neither count nor record, and the eager hot path pays nothing. A compile the callbacks missed (they
  are registered once ``torch._dynamo`` is imported, and ``torch._dynamo.reset()`` clears them) is
  caught on the dump path by ``torch.compiler.is_compiling()`` (:func:`compiling_unmarked`).
* Run time. Compiled code still calls a few wrapped APIs: a backend that runs dynamo's FX graph in
  Python (``backend="eager"``) from the graph's generated code (``x.mul(y)``, ``torch.relu(x)``),
  inductor's generated code for its extern kernels (``extern_kernels.addmm(..., out=buf)``). Those
  calls count like every other top-level call (so names do not depend on whether the switch was on),
  but are not recorded (:func:`from_compiled_graph`, asked on the dump path only).

Names: calls made while compiling never count; the eager calls around a compiled region keep the
names they have in an eager run whenever the compiled region does not use the same API (it does not
count, as inductor's kernels call no wrapped API).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Dict, List, Optional, Tuple

from ptdbg_ascend.inside import THREAD_STATE
from ptdbg_ascend.log import logger

NOT_DUMPED_MESSAGE = ("calls inside torch.compile'd code ({}) are not dumped: compiled code does not call the "
                      "torch APIs one by one; the eager code around it (loss, backward of eager parts, optimizer) "
                      "is. To dump it, run it eagerly (doc/dump_guide.md, \"torch.compile\").")

_LOCK = threading.Lock()
# The thread dicts marked by a start callback and what their "inside" flag was (nested compiles).
_MARKED: List[Tuple[Dict[str, Any], Any]] = []
_TOLD: List[bool] = []  # the one-line message was logged (once per process)
# id(code object) -> (the code, whether it is a dynamo graph's generated code); by id, as ``dump/stack.py`` keys
# frames (a code object's hash is computed from its constants on every lookup). The entry keeps the code alive,
# so an id is never another object's while it is cached.
GRAPH_CODES: Dict[int, Tuple[Any, bool]] = {}
GRAPH_CODES_LIMIT = 4096
_TORCH_DIR = os.path.dirname(os.path.abspath(sys.modules["torch"].__file__)) + os.sep if "torch" in sys.modules else None


class NoCompileFlag:
    """Stands in for ``torch.compiler`` in a torch without ``_is_compiling_flag``."""

    _is_compiling_flag = False


def _on_compile_start(args: Any = None) -> None:
    state = THREAD_STATE.__dict__  # this thread's storage: restored by the end callback, whichever thread runs it
    with _LOCK:
        _MARKED.append((state, state.get("inside", False)))
    state["inside"] = True
    if not _TOLD:
        _TOLD.append(True)
        logger.warning(NOT_DUMPED_MESSAGE.format(_compiled_region()))


def _on_compile_end(args: Any = None) -> None:
    with _LOCK:
        if not _MARKED:
            return
        state, previous = _MARKED.pop()
    state["inside"] = previous


def _handler() -> Optional[Any]:
    if "torch._dynamo" not in sys.modules:
        return None
    try:
        from torch._dynamo.callback import callback_handler

        return callback_handler
    except ImportError:  # a torch without compile callbacks: compiling_unmarked() still guards the dump path
        return None


def install() -> bool:
    """Register the compile callbacks if ``torch._dynamo`` is imported (an optimizer imports it) and
    they are not registered yet (``torch._dynamo.reset()`` clears them). Never imports dynamo (a second
    of import time). Returns whether they are registered."""
    handler = _handler()
    if handler is None:
        return False
    with _LOCK:
        if _on_compile_start not in handler.start_callbacks:
            handler.register_start_callback(_on_compile_start)
        if _on_compile_end not in handler.end_callbacks:
            handler.register_end_callback(_on_compile_end)
    return True


def compiling_unmarked() -> bool:
    """On the dump path: whether this call is made by a compiler that the callbacks did not mark (they
    were missing when the compilation started). Registers them for the next compilations."""
    compiler = sys.modules.get("torch.compiler")
    if compiler is None or not getattr(compiler, "_is_compiling_flag", False):  # (dispatch checks it first)
        return False
    install()
    if not _TOLD:
        _TOLD.append(True)
        logger.warning(NOT_DUMPED_MESSAGE.format(_compiled_region()))
    return True


def from_compiled_graph(frame: Any) -> bool:
    """On the dump path: whether ``frame`` (the wrapper's caller) is compiled code run by a backend:
    the generated code of a graph dynamo built (``GraphModule.forward``, run by ``backend="eager"``),
    inductor's generated wrapper code (it calls ``extern_kernels.addmm(..., out=buf)``), or torch's
    compile runtime (AOTAutograd wrappers, inductor's cudagraph trees). One dict lookup per call; each
    code object is examined once."""
    if frame is None:
        return False
    code = frame.f_code
    entry = GRAPH_CODES.get(id(code))
    if entry is not None:
        return entry[1]
    known = _is_compiled_code(code, frame)
    if len(GRAPH_CODES) >= GRAPH_CODES_LIMIT:
        GRAPH_CODES.clear()  # (dispatch holds the same dict)
    GRAPH_CODES[id(code)] = (code, known)
    return known


def _is_compiled_code(code: Any, frame: Any) -> bool:
    filename = code.co_filename
    if filename.startswith("<eval_with_key>"):
        meta = getattr(frame.f_locals.get("self"), "meta", None)
        return isinstance(meta, dict) and "dynamo_compile_id" in meta
    inductor_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR")  # set by inductor when it writes code
    if inductor_dir and os.path.abspath(filename).startswith(os.path.join(inductor_dir, "")):
        return True
    if _TORCH_DIR is not None and filename.startswith(_TORCH_DIR):
        inner = filename[len(_TORCH_DIR):].replace(os.sep, "/")
        return inner.startswith(("_inductor/", "_functorch/_aot_autograd/", "_dynamo/"))
    return False


def _compiled_region() -> str:
    """``"Model.forward at model.py:12"`` (the frame dynamo compiles, kept by its convert_frame in a
    local named ``frame``), or ``"forward of Model called at train.py:30"`` when that frame is torch's
    own (``torch.compile(module)``); a generic text if neither is found."""
    try:
        frame = sys._getframe(1)
        compiled_code = module = user = None
        while frame is not None:
            filename = frame.f_code.co_filename
            if compiled_code is None and "convert_frame" in filename:
                compiled_code = getattr(frame.f_locals.get("frame"), "f_code", None)
            elif module is None and "eval_frame" in filename:
                owner = frame.f_locals.get("self")
                if type(owner).__name__ == "OptimizedModule":
                    module = type(getattr(owner, "_orig_mod", owner)).__name__
            elif user is None and not filename.startswith("<") and not _is_library(filename):
                user = f"{os.path.basename(filename)}:{frame.f_lineno}"
            frame = frame.f_back
        if compiled_code is not None and not _is_library(compiled_code.co_filename):
            return "{} at {}:{}".format(getattr(compiled_code, "co_qualname", compiled_code.co_name),
                                        os.path.basename(compiled_code.co_filename), compiled_code.co_firstlineno)
        what = f"forward of {module}" if module else "the compiled function"
        return what + (f" called at {user}" if user else "")
    except Exception:  # noqa: BLE001 - the message must never break a compile
        return "the compiled functions"


def _is_library(filename: str) -> bool:
    path = os.path.abspath(filename)
    tool = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    return path.startswith(tool) or (_TORCH_DIR is not None and path.startswith(_TORCH_DIR)) \
        or os.sep + "site-packages" + os.sep in path or os.sep + "lib" + os.sep + "python" in path
