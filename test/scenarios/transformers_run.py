"""One side of a low-precision scenario on a real transformers decoder: a small config, random init, one
training step dumped with the legacy API.

    python transformers_run.py --model neox|llama --dtype float32|bfloat16|float16 --optimizer adamw|sgd
                               [--plant OWNER.API:K:FACTOR] --out DIR

``--plant F.linear:6:1.02`` multiplies the output of the 7th ``F.linear`` call of the process by 1.02, inside
the call: the function is replaced *before* ``ptdbg_ascend`` wraps torch, so the dump records the planted
result under the API's own name (what runs inside a wrapped API is not recorded). OWNER is ``F``
(torch.nn.functional), ``torch`` or ``Tensor``. The model is built in float32 from a fixed seed and cast to
``--dtype``, as a port runs the same weights in another precision. Prints ``loss L``.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F

OWNERS = {"F": F, "torch": torch, "Tensor": torch.Tensor}


def plant(spec: str) -> None:
    """Scale the K-th call of OWNER.API by FACTOR (``spec`` = ``OWNER.API:K:FACTOR``)."""
    target, index, factor = spec.split(":")
    owner_name, api = target.split(".", 1)
    owner, wanted, scale = OWNERS[owner_name], int(index), float(factor)
    original = getattr(owner, api)
    seen = [0]

    def planted(*args, **kwargs):
        out = original(*args, **kwargs)
        seen[0] += 1
        if seen[0] - 1 == wanted:
            out = out.mul(scale)
        return out

    setattr(owner, api, planted)


def build(name: str):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM

    if name == "neox":
        return GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=128, hidden_size=64, num_hidden_layers=3,
                                                num_attention_heads=4, intermediate_size=256,
                                                max_position_embeddings=64))
    return LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=172, max_position_embeddings=64))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("neox", "llama"), required=True)
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    parser.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    parser.add_argument("--plant", default="")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.plant:
        plant(args.plant)
    from ptdbg_ascend import acc_cmp_dump, register_hook, seed_all, set_dump_path, set_dump_switch

    seed_all()
    model = build(args.model)
    model.train()
    model.to(getattr(torch, args.dtype))
    # float16 has no range for Adam's second moments of small gradients (they underflow, the update becomes
    # inf): a float16 run uses SGD, as pure float16 training without loss scaling would have to.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3) if args.optimizer == "adamw" else \
        torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    os.makedirs(args.out, exist_ok=True)
    set_dump_path(os.path.join(args.out, "dump.pkl"))
    register_hook(model, acc_cmp_dump)
    set_dump_switch("ON", mode="api_stack")
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    set_dump_switch("OFF")
    print(f"loss {out.loss.item():.6f}")


if __name__ == "__main__":
    main()
