#!/usr/bin/python3
"""A small real training job for ReclaimNet.

A three-layer MLP learns a noisy synthetic regression problem fixed by the
seed. Model, optimiser, step and every RNG state are saved with torch.save
when ReclaimNet asks (signal) or by itself (exit 85, a reclaim deadline), so
a resumed run continues bit for bit: same step numbers, same losses.

Run it under ReclaimNet, from its bundle (this directory is laid out as
the job's working directory on whichever node runs it):

    reclaimnet run --workdir examples/pytorch --loss-budget 10m -- /usr/bin/python3 -u train.py

or alone (no checkpoints are requested then):

    /usr/bin/python3 examples/pytorch/train.py --steps 200

Each step prints "step=N loss=X". When it finishes, the trained model
(model.pt) and its last step and loss (result.txt) go to
RECLAIMNET_OUTPUT_DIR, where 'reclaimnet fetch JOB' gets them.
"""

import argparse
import datetime
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ next to the example

import torch  # noqa: E402

from reclaimnet_ckpt import EXIT_CHECKPOINTED, Checkpointer  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=1_000_000, help="stop after this many steps")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--width", type=int, default=64, help="hidden layer width")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--step-time", type=float, default=0.0,
                   help="sleep this many seconds per step (a watchable pace for demos and tests)")
    p.add_argument("--exit-after-checkpoint-at", type=int, default=-1, metavar="STEP",
                   help="on the first run, checkpoint at STEP and exit 85 (HTCondor-style self-checkpoint)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    return p.parse_args()


def load(path):
    try:
        return torch.load(path, weights_only=False)
    except TypeError:  # torch < 1.13 has no weights_only
        return torch.load(path)


def main():
    args = parse_args()
    ck = Checkpointer()
    torch.set_num_threads(1)  # one thread: bitwise-reproducible CPU losses
    dev = torch.device(args.device)

    # The problem: fixed by the seed, the same on every run and restart.
    data_rng = torch.Generator().manual_seed(args.seed)
    x = torch.randn(4096, 32, generator=data_rng)
    w_true = torch.randn(32, 1, generator=data_rng)
    y = torch.sin(x @ w_true) + 0.1 * torch.randn(4096, 1, generator=data_rng)
    x, y = x.to(dev), y.to(dev)

    torch.manual_seed(args.seed)
    random.seed(args.seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, args.width), torch.nn.ReLU(),
        torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
        torch.nn.Linear(args.width, 1),
    ).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    batch_rng = torch.Generator().manual_seed(args.seed + 1)
    step = 0

    if ck.restore_dir:
        state = load(os.path.join(ck.restore_dir, "state.pt"))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        step = state["step"]
        torch.set_rng_state(state["torch_rng"])
        batch_rng.set_state(state["batch_rng"])
        random.setstate(state["py_rng"])
        print(f"restored step={step} from {ck.restore_dir} (restart {ck.restart_count})", flush=True)

    def write_checkpoint(d):
        torch.save({
            "model": model.state_dict(),
            "optim": opt.state_dict(),
            "step": step,
            "torch_rng": torch.get_rng_state(),
            "batch_rng": batch_rng.get_state(),
            "py_rng": random.getstate(),
        }, os.path.join(d, "state.pt"))

    ck.ready()
    loss_fn = torch.nn.MSELoss()
    deadline_seen = None
    while step < args.steps:
        idx = torch.randint(0, x.shape[0], (args.batch,), generator=batch_rng).to(dev)
        # Input noise from the global RNG, so its state matters on resume.
        noise = 0.01 * torch.randn(args.batch, 32).to(dev)
        loss = loss_fn(model(x[idx] + noise), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step={step} loss={loss.item():.8f}", flush=True)
        step += 1

        # Step boundary: the only place a checkpoint is written, at most
        # once (a new deadline and a request at once need one checkpoint).
        deadline = ck.deadline()
        reason = ""
        if deadline != deadline_seen:
            deadline_seen = deadline
            print(f"deadline={deadline.isoformat() if deadline else 'none'}", flush=True)
            if deadline is not None:
                reason = " reason=deadline"  # a reclaim is coming: checkpoint now, unasked
        if reason or ck.requested:
            ok = ck.save(write_checkpoint)
            print(f"checkpoint step={step} ok={ok}{reason}", flush=True)
        if step == args.exit_after_checkpoint_at and ck.restart_count == 0:
            ok = ck.save(write_checkpoint)
            print(f"checkpoint step={step} ok={ok}; exiting {EXIT_CHECKPOINTED}", flush=True)
            if ok:
                sys.exit(EXIT_CHECKPOINTED)
        if args.step_time:
            time.sleep(args.step_time)
    out_dir = os.environ.get("RECLAIMNET_OUTPUT_DIR")
    if out_dir and step > 0:
        torch.save(model.state_dict(), os.path.join(out_dir, "model.pt"))
        with open(os.path.join(out_dir, "result.txt"), "w") as f:
            f.write(f"step={step} loss={loss.item():.8f}\n")
    print(f"done step={step} at {datetime.datetime.now(datetime.timezone.utc).isoformat()}", flush=True)


if __name__ == "__main__":
    main()
