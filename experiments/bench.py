"""bench.py: what the compiled loss path buys, how fast generation is, and what Text2Grad costs.

    python -m experiments.bench            # the full sweep (tens of minutes on 2 CPU cores)
    python -m experiments.bench --quick    # a first look, within 2 minutes on 2 CPU cores

Three parts, each measured side by side in one run, so the ratios mean something on a noisy machine:

1. The hot loss path in three forms on the same inputs (experiments/loss_forms.py):
     naive    full log_softmax, then gather; entropy from the full probabilities (what most code does)
     eager    ppo.py's math run eagerly: logsumexp and one exp per logit, no full log-softmax
     compiled the same function through torch.compile (what the PPO loop uses with --compile)
   in two modes: rollout (no grad: log-probs, entropy, the reference's log-probs from a second
   logits tensor) and training (ppo_loss forward and backward with respect to logits and values).
   Reported per shape: time against naive (median after warm-up), extra peak memory over the size
   of one logits tensor, effective bandwidth (the minimal bytes: every logit read once, plus the
   gradient written once when training) and its share of the device's peak on CUDA; then the
   compile time, the recompiles across a sweep of response lengths, and the largest error of
   each form against a float64 computation.
2. Generation: tokens per second with the KV cache and by recomputing the whole prefix each step.
3. One PPO update end to end on the same batch: Text2Grad (its reward model writes a critique
   first) against scalar PPO; then Text2Grad's update again with the loss path compiled, and the
   seconds its compilation costs (what decides --compile's default). Uses the trained models in
   runs/summarize when they exist (run `python -m experiments.protocol` first); otherwise untrained ones,
   whose critiques run to the length limit.

Peak memory on CPU is the process's peak resident set (reset through /proc/self/clear_refs, Linux
only), with glibc told, for that measurement only, to return every large block to the system at
once, so that freed tensors do not hide inside the heap. The gradient of the logits counts as extra
memory in training mode: it is a logits-sized tensor the loss path has to write.
"""
import argparse
import ctypes
import json
import os
import platform
import statistics
import sys
import time
import warnings

import torch

import ppo
from experiments.loss_forms import FORMS, fp64_errors, make_inputs, rollout_call, training_call

# Peak memory bandwidth, bytes/s, by device name; the first key found in the name wins.
PEAK_BANDWIDTH = [("H100 PCIe", 2.0e12), ("H100", 3.35e12), ("H200", 4.8e12), ("A100-SXM4-80GB", 2.04e12),
                  ("A100", 1.56e12)]
# glibc's allocator, for the CPU memory measurement (Linux only; elsewhere the column is empty)
M_MMAP_THRESHOLD = -3
LIBC = ctypes.CDLL("libc.so.6") if sys.platform.startswith("linux") else None


# ---------------------------------------------------------------------------------------------
# Measuring

def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, repeats):
    """Median seconds of fn() over `repeats` runs, after one warm-up run."""
    fn()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def resident_bytes(field, path="/proc/self/status"):
    """A memory figure of /proc/self/status (VmRSS, VmHWM) or /proc/meminfo (MemAvailable), in bytes."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:  # not Linux
        pass
    return 0


def extra_peak_bytes(fn, device, before_run=None):
    """Peak memory during fn() above what was held before it (after before_run(), which frees what
    the previous call left, such as a gradient). None where it cannot be measured."""
    if before_run:
        before_run()
    sync(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn()
        sync(device)
        return torch.cuda.max_memory_allocated() - before
    if LIBC is None:
        return None
    LIBC.mallopt(M_MMAP_THRESHOLD, 1 << 20)  # large blocks straight from and back to the system...
    LIBC.malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # ...so that the peak resident set, reset here, sees every tensor
    before = resident_bytes("VmRSS")
    fn()
    peak = resident_bytes("VmHWM") - before
    LIBC.mallopt(M_MMAP_THRESHOLD, 32 << 20)  # back to the most glibc ever uses, for the timings
    return peak


def bench_loss_path(N, V, dtype, device, repeats):
    """Every form in both modes on one shape. Returns one row per mode."""
    x = make_inputs(N, V, dtype, device)
    logits_bytes = x["logits"].numel() * x["logits"].element_size()
    # minimal traffic: rollout reads two logits tensors; training reads the logits, writes their gradient
    minimal = {"rollout": 2 * logits_bytes, "training": 2 * logits_bytes}
    rows = []
    for mode in ("rollout", "training"):
        row = {"N": N, "V": V, "dtype": str(dtype).replace("torch.", ""), "mode": mode}
        for form in FORMS:
            if mode == "rollout":
                run, reset = rollout_call(form, x), None
            else:
                run, logits = training_call(form, x)
                def reset():
                    logits.grad = None
            seconds = timed(run, device, repeats)
            row[f"{form}_ms"] = 1e3 * seconds
            peak = extra_peak_bytes(run, device, reset)
            row[f"{form}_extra_memory"] = None if peak is None else peak / logits_bytes
            row[f"{form}_GBps"] = minimal[mode] / seconds / 1e9
        for form in ("eager", "compiled"):
            row[f"{form}_speedup"] = row["naive_ms"] / row[f"{form}_ms"]
        rows.append(row)
    return rows, fp64_errors(x)


def compile_and_recompiles(V, device, dtype):
    """Seconds of the first compiled call per mode, with inductor's on-disk caches off (what a first
    run on a new machine pays), then the number of new graphs over a sweep of response lengths and
    batch sizes (0 is the target)."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    result = {}
    x = make_inputs(1024, V, dtype, device, T=64)
    # inductor's one-time start-up (toolchain checks, worker pool) is paid here, not by the first path
    torch.compile(lambda t: t * 2, fullgraph=True)(torch.ones(2, device=device))
    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")
    with torch._inductor.config.patch(force_disable_caches=True):
        for mode, call in (("rollout", lambda: rollout_call("compiled", x)),
                           ("training", lambda: training_call("compiled", x)[0])):
            run = call()
            start = time.perf_counter()
            run()
            sync(device)
            result[f"compile_s_{mode}"] = time.perf_counter() - start
    graphs = counters["stats"]["unique_graphs"]
    for T, N in ((37, 2 * 37), (101, 5 * 101), (200, 3 * 200), (17, 8 * 17)):
        y = make_inputs(N, V, dtype, device, T=T, seed=T)
        rollout_call("compiled", y)()
        training_call("compiled", y)[0]()
    result["recompiles"] = counters["stats"]["unique_graphs"] - graphs
    return result


# ---------------------------------------------------------------------------------------------
# Generation

@torch.no_grad()
def generate_by_recompute(model, idx, new_tokens, generator):
    """Sampling without a cache: the whole prefix runs through the model for every new token."""
    for _ in range(new_tokens):
        logits = model(idx)[1][:, -1]
        token = torch.multinomial(torch.softmax(logits.float(), -1), 1, generator=generator)
        idx = torch.cat([idx, token], 1)
    return idx


def bench_generation(device, lengths, batch_size=16, prompt_len=16):
    """Tokens per second of model.generate (KV cache; on CUDA its decode step replayed as a CUDA graph,
    and also launched kernel by kernel, model.CUDA_GRAPHS False) against recomputing the prefix."""
    import model as model_module
    from model import GPT, GPTConfig, generate
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=prompt_len + max(lengths))).to(device).eval()
    prompts = torch.randint(3, 1024, (batch_size, prompt_len))

    def cached(n):  # eos_id -1 is never sampled, so every sequence runs to n tokens
        return timed(lambda: generate(model, prompts.tolist(), n, eos_id=-1, pad_id=0,
                                      generator=torch.Generator(device).manual_seed(0)), device, 2)
    rows = []
    for n in lengths:
        row = {"new_tokens": n, "batch": batch_size}
        seconds = cached(n)
        recompute = timed(lambda: generate_by_recompute(model, prompts.to(device), n,
                                                        torch.Generator(device).manual_seed(0)), device, 2)
        row["kv_cache_tok_s"] = batch_size * n / seconds
        row["recompute_tok_s"] = batch_size * n / recompute
        row["speedup"] = recompute / seconds
        if torch.device(device).type == "cuda":
            model_module.CUDA_GRAPHS = False
            try:
                row["kv_cache_no_graph_tok_s"] = batch_size * n / cached(n)
            finally:
                model_module.CUDA_GRAPHS = True
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# One PPO update: Text2Grad against scalar PPO on the same batch

def bench_ppo_update(device, batch_size, compare_compile=True):
    import copy
    import dataclasses

    from data import get_task, make_splits
    from data.tokenizer import Tokenizer, training_texts
    from model import GPT, GPTConfig
    from reward import RewardModel
    from experiments.checkpoint import load_checkpoint
    from sft import MAX_NEW_TOKENS

    task = get_task("summarize")
    splits = make_splits(task, {"train": 400, "validation": 10, "test": 10}, seed=0)
    folder = os.path.join("runs", "summarize")
    if all(os.path.exists(os.path.join(folder, f)) for f in ("sft.pt", "reward_cot.pt", "reward_scalar.pt")):
        policy, tokenizer, _ = load_checkpoint(os.path.join(folder, "sft.pt"), device)
        reward_models = {name: load_checkpoint(os.path.join(folder, f"reward_{name}.pt"), device)[0]
                         for name in ("cot", "scalar")}
        source = "trained models from runs/summarize"
    else:
        tokenizer = Tokenizer.train(training_texts(task, splits["train"]), 1024)
        torch.manual_seed(0)
        policy = GPT(GPTConfig(vocab_size=tokenizer.vocab_size)).to(device).eval()
        reward_models = {name: RewardModel(copy.deepcopy(policy), kind, cot=(name == "cot")).to(device).eval()
                         for name, kind in (("cot", "span"), ("scalar", "scalar"))}
        source = "untrained models (run python -m experiments.protocol first for trained ones)"
    config = ppo.PPOConfig(batch_size=batch_size, minibatch_size=min(32, batch_size),
                           max_new_tokens=MAX_NEW_TOKENS)
    examples = splits["train"][:batch_size]
    prompts = [tokenizer.prompt(e.prompt) for e in examples]
    model = ppo.PolicyWithValue(copy.deepcopy(policy))
    state = copy.deepcopy(model.state_dict())
    for attempt in range(2):  # the first pass is a warm-up; the second is timed
        seconds, update, tokens = one_update(task, tokenizer, examples, prompts, model, policy, reward_models,
                                             config, state, device)
    result = {"models": source, "batch": batch_size, "response_tokens": int(tokens), "seconds": seconds,
              "update_s": update, "tokens_per_s": {name: tokens / s for name, s in update.items()},
              "text2grad_over_scalar": update["text2grad"] / update["ppo_scalar"]}
    if not compare_compile:
        return result
    # --compile's default: the same update with the loss path compiled. The first pass pays the
    # compilation (inductor's caches off, as on a new machine); the second is timed.
    torch._dynamo.reset()
    compiled = dataclasses.replace(config, compile=True)
    with torch._inductor.config.patch(force_disable_caches=True):
        first = one_update(task, tokenizer, examples, prompts, model, policy, reward_models, compiled, state, device)[1]
    warm = one_update(task, tokenizer, examples, prompts, model, policy, reward_models, compiled, state, device)[1]
    return {**result, "compiled_update_s": warm, "compile_s": first["text2grad"] - warm["text2grad"],
            "compiled_over_eager": warm["text2grad"] / update["text2grad"]}


def one_update(task, tokenizer, examples, prompts, model, policy, reward_models, config, state, device):
    """Seconds of each part of one update: the shared rollout, then per method its reward and its PPO
    iteration (both from the same starting weights)."""
    import guards
    import text2grad
    batch_size = len(prompts)
    generator = torch.Generator(device).manual_seed(0)
    model.load_state_dict(state)
    start = time.perf_counter()
    batch = ppo.rollout(model, policy, prompts, tokenizer.eos_id, tokenizer.pad_id, config, generator)
    sync(device)
    seconds = {"rollout": time.perf_counter() - start}
    scores = {}
    for name in ("text2grad", "ppo_scalar"):
        reward = text2grad.reward_function(name, task, tokenizer, examples, reward_models, guards.Guards())
        start = time.perf_counter()
        scores[name] = reward(range(batch_size), batch["tokens"], batch["mask"])
        sync(device)
        seconds[f"reward_{name}"] = time.perf_counter() - start
    for name in scores:
        model.load_state_dict(state)
        optimizer = model.optimizer(config)
        start = time.perf_counter()
        ppo.ppo_iteration(model, optimizer, batch, scores[name], config,
                          torch.Generator().manual_seed(0))
        sync(device)
        seconds[f"iteration_{name}"] = time.perf_counter() - start
    update = {name: seconds["rollout"] + seconds[f"reward_{name}"] + seconds[f"iteration_{name}"] for name in scores}
    return seconds, update, batch["mask"].sum().item()


# ---------------------------------------------------------------------------------------------

PARTS = ("loss", "generation", "update")


def main():
    parser = argparse.ArgumentParser(prog="python -m experiments.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few shapes, within 2 minutes on 2 CPU cores")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--only", choices=PARTS, nargs="+", default=PARTS,
                        help="the parts to run (default: all): the loss path, generation, one PPO update")
    parser.add_argument("--out", default=os.path.join("runs", "bench.json"),
                        help="where to write the JSON (default runs/bench.json)")
    args = parser.parse_args()
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("bench: error: --device cuda but CUDA is not available here", file=sys.stderr)
        sys.exit(2)

    if args.quick:
        shapes, lengths, repeats = [(4096, 8192), (4096, 32768)], [32, 128], 3
    else:
        shapes = [(N, V) for N in (4096, 16384) for V in (1024, 8192, 32768, 50304)]
        lengths, repeats = [32, 128, 256], 5
    dtypes = [torch.float32] + ([torch.bfloat16] if device == "cuda" else [])
    name = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine()
    peak = next((bw for key, bw in PEAK_BANDWIDTH if device == "cuda" and key in name), None)
    if device == "cpu":
        available = resident_bytes("MemAvailable", "/proc/meminfo") or float("inf")
        if LIBC is not None:  # the most glibc ever uses: large temporaries are mmapped the same way every run
            LIBC.mallopt(M_MMAP_THRESHOLD, 32 << 20)
    else:
        available = torch.cuda.mem_get_info()[0]
    result = {"device": device, "name": name, "threads": torch.get_num_threads(), "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d"), "loss_path": [], "errors": [], "skipped": []}
    print(f"device {device} ({name}), {torch.get_num_threads()} threads, torch {torch.__version__}")

    if "loss" in args.only:
        bench_loss_part(result, device, shapes, dtypes, peak, available, repeats)
    if "generation" in args.only:
        print("\ngeneration (batch 16, 4 layers x 128, vocabulary 1024): tokens per second")
        result["generation"] = bench_generation(device, lengths)
        for row in result["generation"]:
            graphless = (f" (without the CUDA graph {row['kv_cache_no_graph_tok_s']:.0f})"
                         if "kv_cache_no_graph_tok_s" in row else "")
            print(f"  {row['new_tokens']:>4} new tokens: KV cache {row['kv_cache_tok_s']:>8.0f}{graphless}, "
                  f"recompute {row['recompute_tok_s']:>8.0f}, speed-up {row['speedup']:.1f}x")
    if "update" in args.only:
        bench_update_part(result, device, 32 if args.quick else 64)

    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    tmp = f"{args.out}.tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=2)
    os.replace(tmp, args.out)
    print(f"\n-> {args.out}")


def bench_loss_part(result, device, shapes, dtypes, peak, available, repeats):
    result["compile"] = compile_and_recompiles(8192, device, torch.float32)
    print(f"compile: {result['compile']['compile_s_rollout']:.1f} s (rollout), "
          f"{result['compile']['compile_s_training']:.1f} s (training), caches off; recompiles across 4 new "
          f"response lengths and batch sizes: {result['compile']['recompiles']}")

    print("\nloss path: time and memory against naive eager (extra memory in units of one logits tensor)")
    print(f"{'N':>6} {'V':>6} {'dtype':>8} {'mode':>9} | {'naive ms':>9} {'eager x':>8} {'compiled x':>10} | "
          f"{'naive mem':>9} {'eager mem':>9} {'comp mem':>8} | {'comp GB/s':>9}" + (f" {'of peak':>7}" if peak else ""))
    for dtype in dtypes:
        for N, V in shapes:
            # the inputs hold two logits tensors; naive training five more, in float32 at least
            if (2 * torch.finfo(dtype).bits + 5 * max(32, torch.finfo(dtype).bits)) // 8 * N * V > 0.9 * available:
                result["skipped"].append({"N": N, "V": V, "dtype": str(dtype), "why": "not enough memory"})
                print(f"{N:>6} {V:>6} {str(dtype)[6:]:>8}   skipped: not enough memory")
                continue
            try:
                rows, errors = bench_loss_path(N, V, dtype, device, repeats)
            except torch.OutOfMemoryError:
                result["skipped"].append({"N": N, "V": V, "dtype": str(dtype), "why": "out of memory"})
                print(f"{N:>6} {V:>6} {str(dtype)[6:]:>8}   skipped: out of memory")
                torch.cuda.empty_cache()
                continue
            result["errors"].append({"N": N, "V": V, "dtype": str(dtype), **errors})
            for row in rows:
                if peak:
                    row["compiled_of_peak"] = row["compiled_GBps"] * 1e9 / peak
                result["loss_path"].append(row)
                print(f"{N:>6} {V:>6} {row['dtype']:>8} {row['mode']:>9} | {row['naive_ms']:>9.1f} "
                      f"{row['eager_speedup']:>8.2f} {row['compiled_speedup']:>10.2f} | {memory(row['naive_extra_memory']):>9} "
                      f"{memory(row['eager_extra_memory']):>9} {memory(row['compiled_extra_memory']):>8} | "
                      f"{row['compiled_GBps']:>9.1f}"
                      + (f" {row['compiled_of_peak']:>7.0%}" if peak else ""))
    worst = {form: max(max(e[form].values()) for e in result["errors"]) for form in FORMS} if result["errors"] else {}
    print("largest error against float64 (log-probs, entropies, loss, gradient): "
          + ", ".join(f"{form} {err:.1e}" for form, err in worst.items()))



def bench_update_part(result, device, batch_size):
    print("\none PPO update on the same batch of summarize prompts")
    result["ppo_update"] = bench_ppo_update(device, batch_size)
    u = result["ppo_update"]
    print(f"  {u['models']}; {u['batch']} prompts, {u['response_tokens']} response tokens")
    print("  seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in u["seconds"].items()))
    print(f"  update: Text2Grad {u['update_s']['text2grad']:.2f} s ({u['tokens_per_s']['text2grad']:.0f} tok/s), "
          f"scalar PPO {u['update_s']['ppo_scalar']:.2f} s ({u['tokens_per_s']['ppo_scalar']:.0f} tok/s): "
          f"Text2Grad costs {u['text2grad_over_scalar']:.2f}x")
    print(f"  with the loss path compiled (--compile): Text2Grad's update takes {u['compiled_over_eager']:.2f}x "
          f"the eager one's time, after {u['compile_s']:.1f} s of compilation")


def memory(ratio):
    return "n/a" if ratio is None else f"{abs(ratio):.2f}"


if __name__ == "__main__":
    main()
