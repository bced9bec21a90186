"""What kind of computation an API is: the one table the compare consults to know how an error passes
through a call (:mod:`~ptdbg_ascend.comparison.propagation`) and which advice fits it (the advisor).

A class groups APIs by how they transform their inputs' errors, not by namespace: ``Tensor.__mul__``,
``torch.mul`` and ``Tensor.mul_`` are one product. An in-place variant (``add_``) is its API's class;
``Distributed_*`` calls are communication whatever their name (``Distributed_scatter`` is no
``Tensor.scatter``). An API missing from the table is :data:`OTHER`, judged by the most tolerant general rule.

Torch-free; names are the dump's API names without prefix, counter and direction (``linear``, ``__mul__``).
"""

from __future__ import annotations

from typing import Dict, FrozenSet, NamedTuple, Optional

# -- the classes -------------------------------------------------------------------------------------------
MATMUL = "matmul"  # sums of products over a contraction dimension (linear, matmul, conv)
PRODUCT = "product"  # element-wise product of two tensors
ADDITIVE = "additive"  # signed sums of whole inputs (add, sub, cat, where)
LAYOUT = "layout"  # values moved, selected, copied or cast, never combined (view, getitem, dropout, to)
ACTIVATION = "activation"  # a monotone-ish element-wise function whose output scales with its input (gelu)
PERIODIC = "periodic"  # sin/cos: bounded derivative, output not proportional to input
EXPONENTIAL = "exponential"  # exp: the output's relative error is the input's absolute error
LOGARITHM = "logarithm"  # log: the output's absolute error is the input's relative error
QUOTIENT = "quotient"  # divisions and roots: element-wise relative errors add up
POWER = "power"  # pow/square: relative errors multiplied by the exponent
NORMALIZATION = "normalization"  # subtracts a mean and divides by a spread (layer_norm, batch_norm)
SOFTMAX = "softmax"  # shift-invariant normalisation: moves with the logits' absolute error
SUM = "sum"  # reductions that add up elements (sum, cumsum)
MEAN = "mean"  # reductions that average (mean, avg_pool)
SPREAD = "spread"  # variance and standard deviation
NORM = "norm"  # vector norms: as precise as their input, relatively
SELECTION = "selection"  # picks elements by value (max, topk, max_pool)
LOSS = "loss"  # a loss: a mean of per-element terms
COMMUNICATION = "communication"  # torch.distributed: the other ranks' errors arrive too
OPTIMIZER = "optimizer"  # the fused element-wise updates of an optimizer step (addcdiv_, _foreach_*)
OTHER = "other"  # anything else

# What the advisor's "Next step" speaks of, per class.
ADVICE_GROUPS: Dict[str, str] = {
    MATMUL: "matmul", PRODUCT: "elementwise", ADDITIVE: "elementwise", LAYOUT: "layout", ACTIVATION: "elementwise",
    PERIODIC: "elementwise", EXPONENTIAL: "elementwise", LOGARITHM: "elementwise", QUOTIENT: "elementwise",
    POWER: "elementwise", NORMALIZATION: "normalization", SOFTMAX: "normalization", SUM: "reduction",
    MEAN: "reduction", SPREAD: "reduction", NORM: "reduction", SELECTION: "reduction", LOSS: "reduction",
    COMMUNICATION: "communication", OPTIMIZER: "optimizer", OTHER: "other",
}


class Operands(NamedTuple):
    """Where a contraction finds its factors among the call's inputs (``input.{p}``, ``input.{q}``), its bias
    (None: none) and the length of the sums it makes, from the shapes: ``"q_last"`` the last extent of factor
    q (linear's weight), ``"p_last"`` the last extent of factor p (matmul), ``"conv"`` the product of the
    weight's extents after the first, ``"conv_transpose"`` the weight's extents but the second, ``"one"`` a
    single product per element."""

    p: int
    q: int
    bias: Optional[int]
    terms: str


def _names(text: str) -> FrozenSet[str]:
    return frozenset(text.split())


_MATMUL: Dict[str, Operands] = {}
for _name in "linear npu_linear".split():
    _MATMUL[_name] = Operands(0, 1, 2, "q_last")
for _name in "matmul __matmul__ mm bmm npu_bmmV2 dot vdot inner mv grouped_mm scaled_mm".split():
    _MATMUL[_name] = Operands(0, 1, None, "p_last")
_MATMUL["__rmatmul__"] = Operands(1, 0, None, "p_last")
for _name in "addmm addbmm baddbmm addmv saddmm sspaddmm".split():
    _MATMUL[_name] = Operands(1, 2, 0, "p_last")
for _name in "outer ger".split():
    _MATMUL[_name] = Operands(0, 1, None, "one")
_MATMUL["addr"] = Operands(1, 2, 0, "one")
for _name in "conv1d conv2d conv3d convolution _convolution npu_conv2d npu_convolution conv_tbc".split():
    _MATMUL[_name] = Operands(0, 1, 2, "conv")
for _name in ("conv_transpose1d conv_transpose2d conv_transpose3d npu_conv_transpose2d "
              "npu_convolution_transpose").split():
    _MATMUL[_name] = Operands(0, 1, 2, "conv_transpose")

PRODUCT_OPERANDS = Operands(0, 1, None, "one")

_TABLE: Dict[str, str] = {}


def _add(kind: str, names: str) -> None:
    for name in names.split():
        _TABLE[name] = kind


_add(PRODUCT, "mul __mul__ __rmul__ __imul__ multiply npu_rotary_mul glu npu_geglu npu_swiglu")
_add(ADDITIVE, "add __add__ __radd__ __iadd__ sub __sub__ __rsub__ __isub__ rsub subtract lerp where masked_fill "
               "index_add scatter_add cat concat concatenate stack hstack vstack dstack column_stack row_stack diff "
               "npu_stride_add _add_relu logaddexp logaddexp2 embedding_bag")
_add(LAYOUT, "reshape view view_as reshape_as transpose permute __getitem__ __setitem__ chunk unsafe_chunk split "
             "unsafe_split split_with_sizes unsafe_split_with_sizes tensor_split hsplit vsplit dsplit unbind unsqueeze "
             "squeeze contiguous clone expand expand_as broadcast_to broadcast_tensors flatten unflatten ravel t "
             "narrow select to float half bfloat16 double type_as cpu cuda npu npu_dtype_cast npu_format_cast repeat "
             "repeat_interleave tile index_select embedding pad constant_pad_nd npu_pad roll flip fliplr flipud rot90 "
             "gather take take_along_dim masked_select masked_scatter detach copy_ tril triu diag diag_embed diagflat "
             "diagonal movedim moveaxis swapaxes swapdims unfold pixel_shuffle pixel_unshuffle channel_shuffle "
             "native_channel_shuffle dropout dropout1d dropout2d dropout3d alpha_dropout feature_dropout "
             "feature_alpha_dropout _npu_dropout npu_confusion_transpose npu_transpose npu_slice npu_broadcast "
             "index_put index_copy index_fill scatter put fill fill_ zero_ nan_to_num as_strided alias_copy "
             "real imag view_as_real view_as_complex resolve_conj resolve_neg positive atleast_1d atleast_2d "
             "atleast_3d interpolate upsample upsample_nearest upsample_bilinear grid_sample npu_indexing "
             "block_diag cartesian_prod combinations")
_add(ACTIVATION, "gelu fast_gelu npu_gelu silu npu_silu relu relu6 leaky_relu elu selu celu rrelu prelu mish npu_mish "
                 "hardswish hardsigmoid hardtanh hardshrink softshrink tanhshrink tanh sigmoid logsigmoid softplus "
                 "softsign erf erfinv threshold clamp clamp_min clamp_max clip abs __abs__ absolute neg __neg__ "
                 "negative sign sgn round floor ceil trunc fix frac asinh atan arctan arcsinh")
_add(PERIODIC, "sin cos sinc")
_add(EXPONENTIAL, "exp exp2 expm1 sinh cosh __rpow__ ldexp")
_add(LOGARITHM, "log log2 log10 log1p xlogy digamma lgamma logit")
_add(QUOTIENT, "div __div__ __truediv__ __rtruediv__ __rdiv__ __idiv__ __itruediv__ divide true_divide reciprocal "
               "rsqrt sqrt")
_add(POWER, "pow __pow__ __ipow__ float_power square")
_add(NORMALIZATION, "layer_norm native_layer_norm rms_norm npu_rms_norm group_norm native_group_norm batch_norm "
                    "native_batch_norm _batch_norm_impl_index instance_norm local_response_norm normalize "
                    "npu_layer_norm_eval batch_norm_elemt")
_add(SOFTMAX, "softmax log_softmax softmin _softmax _log_softmax npu_scaled_masked_softmax")
_add(SUM, "sum nansum cumsum trace sum_to_size")
_add(MEAN, "mean nanmean avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool1d adaptive_avg_pool2d "
           "adaptive_avg_pool3d _adaptive_avg_pool2d")
_add(SPREAD, "var std var_mean std_mean")
_add(NORM, "norm frobenius_norm nuclear_norm dist renorm native_norm")
_add(SELECTION, "max min amax amin aminmax _aminmax max_pool1d max_pool2d max_pool3d max_pool1d_with_indices "
                "max_pool2d_with_indices max_pool3d_with_indices adaptive_max_pool1d adaptive_max_pool2d "
                "adaptive_max_pool3d adaptive_max_pool1d_with_indices adaptive_max_pool2d_with_indices "
                "adaptive_max_pool3d_with_indices fractional_max_pool2d fractional_max_pool3d median nanmedian "
                "kthvalue mode topk sort msort cummax cummin maximum minimum fmax fmin npu_max npu_min")
_add(LOSS, "cross_entropy nll_loss mse_loss l1_loss smooth_l1_loss huber_loss binary_cross_entropy "
           "binary_cross_entropy_with_logits kl_div ctc_loss poisson_nll_loss gaussian_nll_loss cosine_embedding_loss "
           "hinge_embedding_loss margin_ranking_loss multi_margin_loss multilabel_margin_loss "
           "multilabel_soft_margin_loss soft_margin_loss triplet_margin_loss npu_softmax_cross_entropy_with_logits")
_add(OPTIMIZER, "addcdiv addcmul _fused_adam_ _fused_adamw_ _fused_sgd_ _fused_adagrad_ npu_bert_apply_adam")

# In-place spellings whose plain name is a different API: kept as they are, not stripped.
_DUNDER = ("__",)


def api_class(prefix: str, api: str) -> str:
    """The class of API ``api`` (the dump's name without prefix, counter and direction, e.g. ``"linear"``)
    under ``prefix`` (``"Functional"``, ``"Tensor"``, ``"Distributed"``...). In-place variants take their
    API's class (``add_`` -> :data:`ADDITIVE`); ``_foreach_*`` are :data:`OPTIMIZER`; an unknown API is
    :data:`OTHER`."""
    if prefix == "Distributed":
        return COMMUNICATION
    if api in _MATMUL:
        return MATMUL
    if api in _TABLE:
        return _TABLE[api]
    if api.startswith("_foreach_"):
        return OPTIMIZER
    if api.endswith("_") and not api.endswith(_DUNDER):
        plain = api[:-1]
        if plain in _MATMUL:
            return MATMUL
        return _TABLE.get(plain, OTHER)
    return OTHER


def operands(api: str) -> Optional[Operands]:
    """The factor, bias and sum-length layout of a :data:`MATMUL` or :data:`PRODUCT` API (its in-place
    variant too); None for any other."""
    plain = api[:-1] if api.endswith("_") and not api.endswith(_DUNDER) else api
    found = _MATMUL.get(api) or _MATMUL.get(plain)
    if found is not None:
        return found
    if _TABLE.get(api, _TABLE.get(plain)) == PRODUCT:
        return PRODUCT_OPERANDS
    return None


def advice_group(kind: str) -> str:
    """``"matmul"``, ``"elementwise"``, ``"layout"``, ``"reduction"``, ``"normalization"``,
    ``"communication"``, ``"optimizer"`` or ``"other"``: what the advisor's next step speaks of."""
    return ADVICE_GROUPS.get(kind, "other")
