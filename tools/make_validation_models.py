#!/usr/bin/env python3
"""Writes the bundled model descriptions of docs/SIMULATOR.md, "Against published measurements",
for Megatron-LM pull request 6683 and issue 6676 (32 GB300, TP2 x gtp_remat8, EP8 x egtp2): a
Kimi-K2-shaped MoE of 12 layers in Megatron-Core's names, split by the domain Megatron
orthogonalizes it over.

    python3 tools/make_validation_models.py [OUTDIR]      (default plans/models)

Kimi-K2's published configuration (config.json of moonshotai/Kimi-K2-Instruct): hidden 7168, 64
heads of MLA (q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v 128), one dense
layer first (intermediate 18432), then MoE layers of 384 routed experts (intermediate 2048) and
one shared expert, vocabulary 163840. The depth is the pull request's: its code mentions "a
12-layer MoE" as the model its measurements ran on; the published text names no model, so the
shapes are Kimi-K2's (which the measured shapes resemble) and the depth is that remark's.

Megatron-LM's names and splits (megatron/core/transformer/multi_latent_attention.py,
moe/experts.py): linear_q_down_proj and linear_kv_down_proj are not TP-split (TELinear,
parallel_mode "duplicated"), linear_q_up_proj and linear_kv_up_proj are column-parallel,
linear_proj row-parallel; the router and the down projections are Muon matrices sharded by
nothing (layer_sharded_muon.py); fc1 of an expert is gate and up fused and orthogonalized whole.

Two files, because the planner does not model expert parallelism: the dense part (every
parameter but the routed experts), planned over the dense domain; and the routed experts one EP
rank holds (384 / 8 = 48 per layer), planned over the expert domain.
"""
import json
import os
import sys

H, QL, KVL, NOPE, ROPE, V, HEADS = 7168, 1536, 512, 128, 64, 128, 64
DENSE_FF, EXPERT_FF, EXPERTS, EP, LAYERS, VOCAB = 18432, 2048, 384, 8, 12, 163840


def p(name, shape, tp, kind):
    return {"name": name, "shape": shape, "tp_dim": tp, "optimizer": kind}


def attention():
    return [
        p("input_layernorm.weight", [H], None, "elementwise"),
        p("self_attention.linear_q_down_proj.weight", [QL, H], None, "matrix"),
        p("self_attention.q_layernorm.weight", [QL], None, "elementwise"),
        p("self_attention.linear_q_up_proj.weight", [HEADS * (NOPE + ROPE), QL], 0, "matrix"),
        p("self_attention.linear_kv_down_proj.weight", [KVL + ROPE, H], None, "matrix"),
        p("self_attention.kv_layernorm.weight", [KVL], None, "elementwise"),
        p("self_attention.linear_kv_up_proj.weight", [HEADS * (NOPE + V), KVL], 0, "matrix"),
        p("self_attention.linear_proj.weight", [H, HEADS * V], 1, "matrix"),
        p("pre_mlp_layernorm.weight", [H], None, "elementwise"),
    ]


def dense_model():
    params = [p("embedding.word_embeddings.weight", [VOCAB, H], 0, "elementwise"),
              {"repeat": 1, "prefix": "decoder.layers.0.",
               "params": attention() + [
                   p("mlp.linear_fc1.weight", [2 * DENSE_FF, H], 0, "matrix"),
                   p("mlp.linear_fc2.weight", [H, DENSE_FF], 1, "matrix")]},
              # Layers 1 .. LAYERS-1, one block each: the format's way to number a mixed stack.
              ] + [{"repeat": 1, "prefix": "decoder.layers.%d." % layer,
                    "params": attention() + [
                        p("mlp.router.weight", [EXPERTS, H], None, "matrix"),
                        p("mlp.shared_experts.linear_fc1.weight", [2 * EXPERT_FF, H], 0, "matrix"),
                        p("mlp.shared_experts.linear_fc2.weight", [H, EXPERT_FF], 1, "matrix")]}
                   for layer in range(1, LAYERS)] + [
              p("decoder.final_layernorm.weight", [H], None, "elementwise"),
              p("output_layer.weight", [VOCAB, H], 0, "elementwise")]
    return {"schema": "canzona.model/1", "name": "kimi-k2-like-12l-dense", "dtype": "bf16",
            "description": "Kimi-K2's shapes (hidden 7168, MLA, one dense layer then MoE layers "
                           "of 384 experts and one shared expert) at 12 layers, without the "
                           "routed experts: the dense domain of Megatron-LM pull request 6683's "
                           "measurements (tools/make_validation_models.py).",
            "params": params}


def expert_model():
    local = EXPERTS // EP
    # The MoE layers: all but the first, dense one.
    return {"schema": "canzona.model/1", "name": "kimi-k2-like-12l-experts-ep8", "dtype": "bf16",
            "description": "The routed experts one of eight EP ranks holds in the 12-layer "
                           "Kimi-K2-shaped model (48 of 384 per MoE layer): the expert domain of "
                           "Megatron-LM pull request 6683's measurements "
                           "(tools/make_validation_models.py).",
            "params": [{"repeat": 1, "prefix": "decoder.layers.%d." % layer,
                        "params": [{"repeat": local, "prefix": "mlp.experts.local_experts.{i}.",
                                    "params": [
                                        p("linear_fc1.weight", [2 * EXPERT_FF, H], 0, "matrix"),
                                        p("linear_fc2.weight", [H, EXPERT_FF], 1, "matrix")]}]}
                       for layer in range(1, LAYERS)]}


def write(model, outdir):
    path = os.path.join(outdir, model["name"] + ".json")
    with open(path, "w") as f:
        json.dump(model, f, indent=2)
        f.write("\n")
    print(path)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "plans/models"
    write(dense_model(), outdir)
    write(expert_model(), outdir)


if __name__ == "__main__":
    main()
