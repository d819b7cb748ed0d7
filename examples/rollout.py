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

Failures are told apart by whose they are (``err.infra``, see ``dsec.errors``):
a platform failure (node lost, out of capacity, sandbox killed by the node)
is retried on a rebuilt sandbox and counted as lost to infrastructure, never
as reward; a model failure (the agent's program hung, ran out of its own
memory, failed) is the rollout's outcome. ``--preempt`` pauses the whole run
midway with one job-level call and resumes it, as a preempted trainer would.
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


#: Attempts per rollout before it is given up as lost to infrastructure.
MAX_ATTEMPTS = 3

#: Counted across the run: rollouts retried after an infra failure, and ones
#: that failed for the model's own reasons (scored 0, never retried).
STATS = {"infra_retries": 0, "infra_lost": 0, "model_errors": 0}


async def rebuild(client: dsec.AsyncClient, sb: dsec.AsyncSandbox, labels) -> dsec.AsyncSandbox:
    """A sandbox to retry on after an infra failure: rebuilt from its
    trajectory log when the SDK has replay (the steps already run come back
    without running again), else a fresh one (the rollout starts over)."""
    replay = getattr(sb, "replay", None)
    if replay is not None:
        try:
            return await replay()
        except dsec.Error as err:
            if not err.infra:
                raise
    try:
        await sb.destroy()
    except dsec.Error:
        pass  # its node may be gone with it
    return await client.create([LAYER], cpu=1, memory_mb=256, ttl_s=600, labels=labels)


async def robust_rollout(client: dsec.AsyncClient, completion: str, labels) -> float:
    """rollout() with the infra/model split: infra failures retried on a
    rebuilt sandbox (up to MAX_ATTEMPTS), model failures scored 0."""
    sb = None
    try:
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                if sb is None:
                    sb = await client.create([LAYER], cpu=1, memory_mb=256, ttl_s=600,
                                             labels=labels)
                return await rollout(sb, completion)
            except dsec.Error as err:
                if not err.infra:  # the request's or the agent's doing: that is its outcome
                    STATS["model_errors"] += 1
                    return 0.0
                if attempt == MAX_ATTEMPTS:
                    STATS["infra_lost"] += 1
                    raise
                STATS["infra_retries"] += 1
                print(f"infra failure (attempt {attempt}): {err.message}; retrying",
                      file=sys.stderr)
                try:
                    sb = await rebuild(client, sb, labels) if sb is not None else None
                except dsec.Error:
                    sb = None  # create again on the next attempt
    finally:
        if sb is not None:  # always give the sandbox back
            try:
                await sb.destroy()
            except dsec.Error:
                pass
    return 0.0


async def run_group(client: dsec.AsyncClient, g: int, n: int, seed: int, run_id: str):
    """One GRPO group: n rollouts in parallel, each in its own sandbox."""
    rng = random.Random(seed * 1000 + g)
    completions = [policy_sample(rng) for _ in range(n)]
    t0 = time.monotonic()
    labels = {"app": "rollout-example", "run": run_id, "group": str(g)}
    rewards = await asyncio.gather(*(robust_rollout(client, c, labels) for c in completions))
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
        work = asyncio.gather(*(run_group(client, g, args.rollouts, args.seed, run_id)
                                for g in range(args.groups)))
        if args.preempt:
            # The trainer is preempted: pause the whole run (every node, one
            # call; memory freed, TTLs stand still), then come back. Calls on
            # a paused sandbox would resume it anyway (transparent resume).
            await asyncio.sleep(args.preempt)
            paused = await client.pause(labels={"run": run_id})
            print(f"preempted: paused {len(paused)} sandboxes ({len(paused.errors)} errors)")
            resumed = await client.resume(labels={"run": run_id})
            print(f"back: resumed {len(resumed)} sandboxes")
        groups = await work
        left = await client.list(labels={"run": run_id})
    wall = time.monotonic() - t0
    for res in groups:
        rewards = " ".join(f"{r:.2f}" for r in res["rewards"])
        print(f"group {res['group']:2d}  mean reward {res['mean']:.3f}  [{rewards}]  "
              f"{res['seconds']:.2f}s")
    total = args.groups * args.rollouts
    print(f"{total} rollouts in {wall:.2f}s ({total / wall:.1f} rollouts/s), "
          f"mean reward {statistics.fmean(r for res in groups for r in res['rewards']):.3f}")
    print(f"infra retries {STATS['infra_retries']}, lost to infra {STATS['infra_lost']}, "
          f"model errors {STATS['model_errors']}")
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
    p.add_argument("--preempt", type=float, default=0, metavar="S",
                   help="pause and resume the whole run (job-level) after S seconds")
    sys.exit(asyncio.run(main(p.parse_args())))
