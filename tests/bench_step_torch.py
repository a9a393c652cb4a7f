#!/usr/bin/env python3
"""PyTorch eager reference for tests/bench_step.c: one training step of BERT for QA.

The same step as the C bench: BertForQuestionAnswering built from a config.json (random
weights: speed does not depend on their values), batch B x S of random token ids, every
mask 1, random start/end labels, train mode (dropout on), forward, backward of the mean
start/end cross-entropy, clip_grad_norm_(1.0), Adam with weight decay 0.01 (AdamW, the
usual BERT fine-tuning step). fp32 on the CPU, attention "eager" (the explicit
softmax(QK^T)V of the C model; --attn sdpa for PyTorch's fused kernel, transformers'
default). --autocast bf16 or fp16 runs the forward and the loss under
torch.autocast("cpu", dtype) (the backward follows the dtypes autocast chose), as users
train in 16 bits on a CPU: the peer of mpx's bf16-master and amp.

With --eval, the evaluation forward instead: eval mode (no dropout) under
torch.inference_mode(), no labels, start/end logits only.

Prints one line:  torch_step_s MEDIAN (min MIN, threads N, steps K, attn A)
         (--eval) torch_eval_s MEDIAN (...)
Usage: bench_step_torch.py --config DIR/config.json [--threads N] [--steps K] [--batch B] [--seq S] [--eval]
                           [--attn eager|sdpa] [--autocast none|bf16|fp16]

With --serve it times nothing on its own: after two warm-up training steps and one warm-up
evaluation forward it prints "ready ..." and then, for each line read on stdin, runs one
step ("step") or one evaluation forward ("eval") and prints "step WALL CPU" or "eval WALL
CPU" (seconds; CPU = every thread of this process); "quit" or the end of stdin ends it.
bench_step.c drives it between its own timed steps, so that the two are timed alternately
under the same load.
"""
import argparse
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=3)
    ap.add_argument("--seq", type=int, default=384)
    ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"])
    ap.add_argument("--autocast", default="none", choices=["none", "bf16", "fp16"])
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--pad", type=float, default=0.0, help="fraction of each window masked (bench_step --pad)")
    ap.add_argument("--serve", action="store_true", help="time one step or forward per stdin line (above)")
    a = ap.parse_args()

    import torch
    from transformers import BertConfig, BertForQuestionAnswering

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cfg = BertConfig.from_json_file(a.config)
    cfg._attn_implementation = a.attn
    model = BertForQuestionAnswering(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    g = torch.Generator().manual_seed(a.seed)
    ids = torch.randint(1000, cfg.vocab_size, (a.batch, a.seq), generator=g)
    seg = torch.zeros_like(ids)
    seg[:, a.seq // 4:] = 1
    mask = torch.ones_like(ids)
    valid = a.seq - int(a.pad * a.seq + 0.5)
    ids[:, valid:] = 0
    seg[:, valid:] = 0
    mask[:, valid:] = 0
    start = torch.randint(0, valid, (a.batch,), generator=g)
    end = torch.randint(0, valid, (a.batch,), generator=g)

    ac_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.autocast)

    def autocast():
        return torch.autocast("cpu", dtype=ac_dtype, enabled=ac_dtype is not None)

    def step():
        with autocast():
            out = model(input_ids=ids, token_type_ids=seg, attention_mask=mask,
                        start_positions=start, end_positions=end)
        opt.zero_grad(set_to_none=False)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(out.loss.detach())

    def forward_only():
        model.eval()
        with torch.inference_mode(), autocast():
            out = model(input_ids=ids, token_type_ids=seg, attention_mask=mask)
            return float(out.start_logits[0, 0])

    def timed(fn):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        return time.perf_counter() - t0, time.process_time() - c0

    if a.serve:
        # warm-up: allocations, first-touch, MKL/oneDNN dispatch; two steps where mpx's
        # case takes one, so that nothing left of PyTorch's start counts against it
        step()
        step()
        forward_only()
        model.train()
        print("ready threads %d torch %s attn %s autocast %s"
              % (torch.get_num_threads(), torch.__version__, a.attn, a.autocast), flush=True)
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "step":
                print("step %.6f %.6f" % timed(step), flush=True)
            elif cmd == "eval":
                print("eval %.6f %.6f" % timed(forward_only), flush=True)
                model.train()
            elif cmd == "quit":
                break
            else:
                print("error: unknown command %r" % cmd, flush=True)
                return 1
        return 0

    if a.eval:
        step = forward_only  # noqa: F811 (the figure is the forward alone)

    step()  # warm-up: allocations, first-touch, MKL/oneDNN dispatch
    times, cpu = [], []
    for _ in range(a.steps):
        wall, c = timed(step)
        times.append(wall)
        cpu.append(c)
    print("%s %.4f (min %.4f, threads %d, steps %d, attn %s, autocast %s, torch %s)"
          % ("torch_eval_s" if a.eval else "torch_step_s", statistics.median(times), min(times),
             torch.get_num_threads(), a.steps, a.attn, a.autocast, torch.__version__))
    # every thread's CPU seconds (OpenMP threads that spin while they wait count too:
    # OMP_WAIT_POLICY=passive keeps that out)
    print("%s %.4f" % ("torch_eval_cpu_s" if a.eval else "torch_cpu_s", statistics.median(cpu)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
