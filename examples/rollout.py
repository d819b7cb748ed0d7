#!/usr/bin/env python3
"""A GRPO-shaped rollout loop on dsec sandboxes -- copy it and swap in your policy.

For each training step, GRPO samples a *group* of completions for one prompt,
scores each one, and normalizes rewards within the group. Here every rollout
gets its own sandbox (fresh state, no cross-talk), the "policy" writes a
solution file, runs it a few times like an agent would, and a grader inside the
sandbox turns the outcome into a reward. All groups run concurrently on one
AsyncClient: one connection, no thread per call.

    export DSEC_ADDR=127.0.0.1:7700        # a node's --listen address
    python3 examples/rollout.py --groups 8 --rollouts 8

Swap `policy_sample` for calls to your model and `GRADER` for your task's tests.
"""

import argparse
import asyncio
import json
import random
import statistics
import sys
import time

import dsec

LAYER = "base/python@3.11"

# The task every rollout attempts: a function that returns the sum of squares.
PROMPT = "Write solve(xs) returning the sum of the squares of xs."

# Candidate "completions": a stand-in for sampling from the policy.
CANDIDATES = [
    "def solve(xs):\n    return sum(x * x for x in xs)\n",            # correct
    "def solve(xs):\n    return sum(xs) ** 2\n",                       # wrong
    "def solve(xs):\n    return sum(x ** 2 for x in xs[1:])\n",        # off by one
    "def solve(xs):\n    while True:\n        pass\n",                 # hangs
    "def solve(xs):\n    return sum(map(lambda x: x*x, xs))\n",       # correct
    "def solve(xs)\n    return 0\n",                                   # syntax error
]

# Runs inside the sandbox; prints the fraction of tests passed (the reward).
GRADER = """\
import json, sys
sys.path.insert(0, "/work")
tests = [([1, 2, 3], 14), ([], 0), ([-2, 5], 29), ([10], 100)]
try:
    from solution import solve
except Exception as e:
    print(json.dumps({"reward": 0.0, "error": type(e).__name__}))
    sys.exit(0)
passed = sum(1 for xs, want in tests if solve(xs) == want)
print(json.dumps({"reward": passed / len(tests)}))
"""


def policy_sample(rng: random.Random) -> str:
    """Stand-in for sampling a completion from the model."""
    return rng.choice(CANDIDATES)


async def rollout(sb: dsec.AsyncSandbox, completion: str) -> float:
    """One trajectory in one sandbox: write, probe, grade. Returns the reward."""
    # 1. the agent writes its solution and a scratch file
    await sb.write_file("/work/solution.py", completion)
    await sb.write_file("/work/notes.txt", f"prompt: {PROMPT}\n")

    # 2. a few agent-style commands; each is bounded so a bad program cannot stall the step
    await sb.exec("ls -la /work && python3 --version", timeout_s=30)
    probe = await sb.exec(["python3", "-c", "import solution; print(solution.solve([3, 4]))"],
                          cwd="/work", timeout_s=5)
    if probe.timed_out:
        return 0.0  # the program hung: no reward, the sandbox killed it for us

    # 3. grade inside the sandbox (untrusted code never runs on the trainer)
    await sb.write_file("/grader/grade.py", GRADER)
    graded = await sb.exec(["python3", "/grader/grade.py"], timeout_s=10)
    if not graded.ok:
        return 0.0
    return float(json.loads(graded.stdout.strip().splitlines()[-1])["reward"])


async def run_group(client: dsec.AsyncClient, g: int, n: int, seed: int, run_id: str):
    """One GRPO group: n sandboxes created together, n rollouts in parallel, all destroyed."""
    rng = random.Random(seed * 1000 + g)
    completions = [policy_sample(rng) for _ in range(n)]
    t0 = time.monotonic()
    # create_many destroys the ones it made if any create fails, then raises
    sandboxes = await client.create_many(n, [LAYER], cpu=1, memory_mb=256, ttl_s=600,
                                         labels={"app": "rollout-example", "run": run_id,
                                                 "group": str(g)})
    try:
        rewards = await asyncio.gather(*(rollout(sb, c) for sb, c in zip(sandboxes, completions)))
    finally:
        # always give the sandboxes back, also when a rollout raised
        await asyncio.gather(*(sb.destroy() for sb in sandboxes), return_exceptions=True)
    mean = statistics.fmean(rewards)
    std = statistics.pstdev(rewards)
    advantages = [(r - mean) / (std + 1e-6) for r in rewards]  # GRPO's group-relative advantage
    return {"group": g, "rewards": rewards, "advantages": advantages, "mean": mean,
            "seconds": time.monotonic() - t0}


async def main(args) -> int:
    client = dsec.AsyncClient(args.addr)  # None -> $DSEC_ADDR -> 127.0.0.1:7700
    run_id = f"{int(time.time())}"
    t0 = time.monotonic()
    async with client:
        groups = await asyncio.gather(*(run_group(client, g, args.rollouts, args.seed, run_id)
                                        for g in range(args.groups)))
        left = await client.list(labels={"run": run_id})
    wall = time.monotonic() - t0
    for res in groups:
        rewards = " ".join(f"{r:.2f}" for r in res["rewards"])
        print(f"group {res['group']:2d}  mean reward {res['mean']:.3f}  [{rewards}]  "
              f"{res['seconds']:.2f}s")
    total = args.groups * args.rollouts
    print(f"{total} rollouts in {wall:.2f}s ({total / wall:.1f} rollouts/s), "
          f"mean reward {statistics.fmean(r for res in groups for r in res['rewards']):.3f}")
    if left:
        print(f"warning: {len(left)} sandboxes left behind", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--groups", type=int, default=8, help="GRPO groups (prompts) per step")
    p.add_argument("--rollouts", type=int, default=8, help="rollouts (sandboxes) per group")
    p.add_argument("--addr", default=None, help="node native address (default $DSEC_ADDR)")
    p.add_argument("--seed", type=int, default=0)
    sys.exit(asyncio.run(main(p.parse_args())))
