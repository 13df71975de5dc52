"""qfx against peer libraries on the hardware-efficient ansatz HEA(n, L), in one run.

HEA(n, L): per layer, RY(theta[l, i, 0]) on every wire i, then RZ(theta[l, i, 1]) on every wire, then
CNOT(i, i + 1) for i = 0..n-2; cost sum_i <Z_i>; complex64; parameters uniform in [0, 2 pi) from a fixed
seed (the same draw as benchmarks/hea.py).

Every (library, workload, n, L) config runs in a fresh process (`worker_LIB.py`): first calls include
tracing and compilation with no persistent compilation cache, and the memory workload reads that process's
peak RSS (ru_maxrss). qfx runs in the interpreter that runs this script (qfx's own environment); the peers
run in benchmarks/peers/.venv (made by setup.sh), so the peers' pins never touch qfx's JAX.

Before timing, every library's value and gradient must match qfx's (relative 1e-3) at L = 2 for each
n <= 12; a library that disagrees is reported loudly and its rows are marked INVALID.

Workloads:
  width   value_and_grad of HEA(n, L = 10), n = 4, 8, 12, 16, 20: first call and steady state
  depth   n = 8, L = 10 and 200: first call (flat in L when layers are scanned) and steady (linear in L)
  batch   n = 8, L = 4, 1024 parameter sets: forward and value_and_grad (vmap / broadcasting / loops)
  memory  n = 20, L = 20 value_and_grad: peak RSS of a fresh process and time per call

Usage (from the repository root, with qfx's environment):
    bash benchmarks/peers/setup.sh                       # once: the peers' own virtual environment
    .venv/bin/python benchmarks/peers/run.py             # everything, 300 s cap per config
    .venv/bin/python benchmarks/peers/run.py --quick     # smoke test: n = 4, 8, small batch, 60 s cap
    .venv/bin/python benchmarks/peers/run.py --only qfx,qujax --workloads width,memory --time-cap 120
"""

import argparse
import datetime
import importlib.util
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from machine import cpu_name  # noqa: E402  (benchmarks/machine.py)

HERE = os.path.dirname(os.path.abspath(__file__))
TOL = 1e-3
TIMES = ("first_s", "steady_s")

# key -> (label, worker script, environment, extra job keys, compiled with jax.jit)
LIBRARIES = {
    "qfx": ("qfx (jax.jit, default diff)", "worker_qfx.py", "qfx", {}, True),
    "qfx-adjoint": (
        "qfx (jax.jit, diff=qfx.diff.Adjoint())",
        "worker_qfx.py",
        "qfx",
        {"diff": "adjoint"},
        True,
    ),
    "qfx-lean": (
        "qfx (jax.jit without XLA's CPU fusion emitters, diff=qfx.diff.Adjoint())",
        "worker_qfx.py",
        "qfx",
        {"diff": "adjoint", "emitters": False},
        True,
    ),
    "pennylane": (
        "PennyLane default.qubit (jax.jit, backprop)",
        "worker_pennylane.py",
        "peers",
        {"device": "default.qubit"},
        True,
    ),
    "lightning": (
        "PennyLane lightning.qubit (adjoint, no jit)",
        "worker_pennylane.py",
        "peers",
        {"device": "lightning.qubit"},
        False,
    ),
    "tensorcircuit": ("TensorCircuit-NG (jax, K.jit)", "worker_tensorcircuit.py", "peers", {}, True),
    "tensorcircuit-scan": (
        "TensorCircuit-NG (jax, K.jit, layers in K.scan)",
        "worker_tensorcircuit.py",
        "peers",
        {"scan": True},
        True,
    ),
    "qujax": ("qujax (jax.jit)", "worker_qujax.py", "peers", {}, True),
}
WORKLOADS = ("width", "depth", "batch", "memory")


def fmt(seconds) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms" if seconds < 0.01 else f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"


class Harness:
    def __init__(self, args):
        self.args = args
        self.results = {}  # (lib, workload, n, L, batch, repeats) -> result dict
        self.log = []
        self.invalid = {}  # lib -> reason
        self.pythons = {"qfx": sys.executable, "peers": args.peers_python}
        self.worker_env = dict(os.environ)
        self.worker_env.pop("JAX_COMPILATION_CACHE_DIR", None)
        self.worker_env["JAX_ENABLE_COMPILATION_CACHE"] = "false"
        self.count = 0

    # ---- running one config -------------------------------------------------------------------------
    def run(self, lib, workload, n, L, batch=0, repeats=None, full=False):
        repeats = self.args.repeats if repeats is None else repeats
        key = (lib, workload, n, L, batch, repeats)
        if key in self.results:
            return self.results[key]
        label, script, env, extra, _ = LIBRARIES[lib]
        python = self.pythons[env]
        cap = self.args.time_cap
        job = dict(workload=workload, n=n, L=L, batch=batch, repeats=repeats, cap=cap, full=full, **extra)
        where = f"{lib} {workload} n={n} L={L}" + (f" batch={batch}" if batch else "")
        self.count += 1
        print(f"[{self.count}] {where} ...", end=" ", file=sys.stderr, flush=True)
        start = time.perf_counter()
        status, result, tail = "ok", None, ""
        try:
            proc = subprocess.run(
                [python, os.path.join(HERE, script), json.dumps(job)],
                capture_output=True,
                text=True,
                timeout=cap,
                env=self.worker_env,
                cwd=HERE,
            )
            stdout, tail = proc.stdout, (proc.stderr or "")[-3000:]
            if proc.returncode != 0:
                status = f"exit {proc.returncode}"
        except subprocess.TimeoutExpired as e:
            status = "timeout"
            stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            tail = (e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or ""))[-3000:]
        except OSError as e:
            status, stdout, tail = "error", "", str(e)
        for line in stdout.splitlines():
            if line.startswith("RESULT ") or (line.startswith("PARTIAL ") and result is None):
                result = json.loads(line.split(" ", 1)[1])
        if result is None:
            result = {}
        if result.get("error") and status == "ok":
            status = "error"
        if status not in ("ok", "timeout") and not result.get("error"):
            result["error"] = status
        result.update(status=status, wall_s=time.perf_counter() - start, job=job, library_key=lib)
        if status != "ok" and status != "timeout":
            result["stderr_tail"] = tail
        self.results[key] = result
        self.log.append(result)
        summary = (
            status
            if status != "ok"
            else f"first {fmt(result.get('first_s'))}, steady {fmt(result.get('steady_s'))}"
        )
        print(f"{summary} ({time.perf_counter() - start:.1f} s)", file=sys.stderr, flush=True)
        if status not in ("ok", "timeout"):
            print(
                f"    {result.get('error')}\n" + "\n".join("    " + s for s in tail.splitlines()[-8:]),
                file=sys.stderr,
            )
        return result

    def dominated(self, lib, workload, n, L, batch=0):
        """Skip a config if the same library already hit the cap on one no larger."""
        for (l2, w2, n2, L2, b2, _), r in self.results.items():
            if (
                l2 == lib
                and w2 == workload
                and b2 == batch
                and n2 <= n
                and L2 <= L
                and r["status"] == "timeout"
            ):
                return True
        return False

    def timed(self, lib, workload, n, L, batch=0):
        if lib not in self.args.only or (LIBRARIES[lib][2] == "peers" and not self.have_peers):
            return None
        key = (lib, workload, n, L, batch, self.args.repeats)
        if key not in self.results and self.dominated(lib, workload, n, L, batch):
            return {"status": "skipped"}
        result = self.run(lib, workload, n, L, batch)
        if lib != "qfx" and result.get("status") == "ok" and "qfx" in self.args.only:
            ref = (
                self.run("qfx", workload, n, L, batch)
                if not self.dominated("qfx", workload, n, L, batch)
                else None
            )
            if ref and ref.get("status") == "ok":
                ok, msg = agree(result, ref)
                if not ok:
                    result["mismatch"] = msg
                    print(f"!!! {lib} {workload} n={n} L={L}: disagrees with qfx: {msg}", file=sys.stderr)
        return result

    # ---- agreement check ----------------------------------------------------------------------------
    def check(self, widths):
        ns = [n for n in widths if n <= 12]
        rows = []
        libs = [
            lib
            for lib in LIBRARIES
            if lib in self.args.only and (LIBRARIES[lib][2] == "qfx" or self.have_peers)
        ]
        for n in ns:
            ref = self.run("qfx", "vg", n, 2, repeats=0, full=True)
            if ref.get("status") != "ok":
                raise SystemExit(
                    f"qfx failed the reference run at n={n}: {ref.get('error')}\n{ref.get('stderr_tail', '')}"
                )
            for lib in libs:
                if lib == "qfx":
                    continue
                r = self.run(lib, "vg", n, 2, repeats=0, full=True)
                if r.get("status") != "ok":
                    ok, msg = False, f"did not run: {r.get('error') or r.get('status')}"
                else:
                    ok, msg = agree(r, ref)
                rows.append((lib, n, ok, msg))
                if not ok:
                    self.invalid.setdefault(lib, f"n={n}: {msg}")
                    print(f"\n!!! AGREEMENT CHECK FAILED: {lib} at n={n}, L=2: {msg}\n", file=sys.stderr)
        return ns, rows


def agree(result, ref, tol=TOL):
    """Values and gradients within `tol`, relative (values against max(1, |value|), gradients in norm)."""
    v, v0 = np.asarray(result.get("value", [])), np.asarray(ref.get("value", []))
    if v.shape != v0.shape:
        return False, f"value shape {v.shape} vs {v0.shape}"
    dv = float(np.max(np.abs(v - v0) / np.maximum(1.0, np.abs(v0)))) if v.size else 0.0
    msg = f"value err {dv:.1e}"
    ok = dv <= tol
    if "grad" in ref:
        g, g0 = np.asarray(result.get("grad", [])), np.asarray(ref["grad"])
        if g.shape != g0.shape:
            return False, f"gradient shape {g.shape} vs {g0.shape}"
        dg = float(np.linalg.norm(g - g0) / max(np.linalg.norm(g0), 1e-12))
        dn = abs(result.get("grad_norm", 0.0) - ref["grad_norm"]) / max(ref["grad_norm"], 1e-12)
        msg += f", grad err {dg:.1e}"
        ok = ok and dg <= tol and dn <= tol
    return ok, msg


def cell(r, cap, steady=True):
    """'first / steady' for a result."""
    if r is None:
        return "-"
    status = r.get("status")
    if status == "skipped":
        return "-"
    if status == "timeout":
        if r.get("first_s") is not None:  # first call finished, steady state ran out of time
            return f"{fmt(r['first_s'])} / >cap"
        return f">{cap:.0f} s"
    if status != "ok":
        return "error"
    flag = " (!)" if r.get("mismatch") else ""
    if not steady:
        return fmt(r.get("first_s")) + flag
    return f"{fmt(r.get('first_s'))} / {fmt(r.get('steady_s'))}{flag}"


def ratio(qfx_r, peer_rs, field, cap):
    """best valid peer / qfx for a time field; '>' when every peer ran out of time."""
    if not qfx_r or qfx_r.get("status") != "ok" or qfx_r.get(field) is None:
        return "-"
    q = qfx_r[field]
    done = [
        r[field]
        for r in peer_rs
        if r and r.get("status") == "ok" and r.get(field) is not None and not r.get("mismatch")
    ]
    if done:
        return f"{min(done) / q:.2f}×"
    if any(r and r.get("status") in ("timeout", "skipped") for r in peer_rs):
        return f">{cap / q:.0f}×" if field == "first_s" else "-"
    return "-"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke test: n = 4, 8; L = 10, 50; batch 64; cap 60 s"
    )
    parser.add_argument(
        "--only", default=",".join(LIBRARIES), help=f"comma-separated subset of {','.join(LIBRARIES)}"
    )
    parser.add_argument(
        "--workloads", default=",".join(WORKLOADS), help=f"comma-separated subset of {','.join(WORKLOADS)}"
    )
    parser.add_argument(
        "--time-cap", type=float, default=None, help="seconds per config (default 300; 60 with --quick)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=7,
        help="at least this many steady-state calls per median (more for short calls, fewer above 1 s)",
    )
    parser.add_argument("--widths", default=None, help="n for the width workload (default 4,8,12,16,20)")
    parser.add_argument("--depths", default=None, help="L for the depth workload at n = 8 (default 10,200)")
    parser.add_argument(
        "--batch", type=int, default=None, help="parameter sets in the batch workload (default 1024)"
    )
    parser.add_argument("--memory", default=None, help="n,L of the memory workload (default 20,20)")
    parser.add_argument("--skip-check", action="store_true", help="do not run the agreement check first")
    parser.add_argument("--peers-python", default=os.path.join(HERE, ".venv", "bin", "python"))
    parser.add_argument(
        "--out", default=None, help="raw results JSON (default benchmarks/peers/results/peers-DATE.json)"
    )
    args = parser.parse_args()

    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    if "qfx" not in args.only:  # the reference of the agreement check and of the ratios
        args.only.insert(0, "qfx")
    unknown = [s for s in args.only if s not in LIBRARIES]
    if unknown:
        parser.error(f"unknown libraries {unknown}; choose from {list(LIBRARIES)}")
    workloads = [s.strip() for s in args.workloads.split(",") if s.strip()]
    if any(w not in WORKLOADS for w in workloads):
        parser.error(f"unknown workloads in {workloads}; choose from {list(WORKLOADS)}")
    if args.time_cap is None:
        args.time_cap = 60.0 if args.quick else 300.0
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    widths = ints(args.widths) if args.widths else ([4, 8] if args.quick else [4, 8, 12, 16, 20])
    depths = ints(args.depths) if args.depths else ([10, 50] if args.quick else [10, 200])
    batch = args.batch or (64 if args.quick else 1024)
    mem_n, mem_L = ints(args.memory) if args.memory else ((8, 20) if args.quick else (20, 20))
    batch_n, batch_L = 8, 4

    h = Harness(args)
    if importlib.util.find_spec("qfx") is None:
        raise SystemExit(
            f"{sys.executable} cannot import qfx: run this with qfx's environment (.venv/bin/python)"
        )
    h.have_peers = os.path.exists(args.peers_python)
    if not h.have_peers and any(LIBRARIES[lib][2] == "peers" for lib in args.only):
        print(
            f"!!! no peers environment at {args.peers_python}: run `bash benchmarks/peers/setup.sh`; "
            "running qfx only",
            file=sys.stderr,
        )
    start = time.perf_counter()
    cap = args.time_cap
    libs = [lib for lib in LIBRARIES if lib in args.only]
    peers = [lib for lib in libs if LIBRARIES[lib][2] == "peers"]  # qfx's own variants are not peers
    out = []

    def label(lib):
        name = LIBRARIES[lib][0]
        return f"{name} — INVALID: {h.invalid[lib]}" if lib in h.invalid else name

    def ratio_rows(columns, tail=""):
        """'qfx ratio to best peer' rows; columns: (qfx result, {peer: result}, fields joined by ' / ')."""
        if "qfx" not in libs:
            return []
        valid = [p for p in peers if p not in h.invalid]
        groups = [("best peer", valid)]
        jitted = [p for p in valid if LIBRARIES[p][4]]
        if jitted and jitted != valid:
            groups.append(("best jitted peer", jitted))
        rows = []
        for name, group in groups:
            if not group:
                continue
            fields = columns[0][2]
            what = " (" + " / ".join(f.split("_")[0] for f in fields) + ")" if len(fields) > 1 else ""
            cells = [
                " / ".join(ratio(q, [by_peer[p] for p in group], f, cap) for f in flds)
                for q, by_peer, flds in columns
            ]
            rows.append(f"| **qfx ratio to {name}**{what} | " + " | ".join(cells) + " |" + tail)
        return rows

    check_rows = []
    if not args.skip_check:
        print("== agreement check (L = 2) ==", file=sys.stderr)
        check_ns, check_rows = h.check(widths)

    if "width" in workloads:
        print("== width ==", file=sys.stderr)
        res = {(lib, n): h.timed(lib, "vg", n, 10) for n in widths for lib in libs}
        out.append("### 1. value_and_grad of HEA(n, L = 10): first call / steady state\n")
        out.append("| library | " + " | ".join(f"n = {n}" for n in widths) + " |")
        out.append("|---|" + "---:|" * len(widths))
        for lib in libs:
            out.append(f"| {label(lib)} | " + " | ".join(cell(res[lib, n], cap) for n in widths) + " |")
        out += ratio_rows([(res["qfx", n], {p: res[p, n] for p in peers}, TIMES) for n in widths])
        out.append("")

    if "depth" in workloads:
        print("== depth ==", file=sys.stderr)
        n = 8
        res = {(lib, L): h.timed(lib, "vg", n, L) for L in depths for lib in libs}
        lo, hi = depths[0], depths[-1]
        out.append(
            f"### 2. value_and_grad of HEA(n = {n}, L): first call / steady state, "
            f"and growth from L = {lo} to {hi}\n"
        )
        out.append(
            "| library | "
            + " | ".join(f"L = {L}" for L in depths)
            + f" | first call ×{hi}/{lo} | steady ×{hi}/{lo} |"
        )
        out.append("|---|" + "---:|" * (len(depths) + 2))

        def growth(lib, field):
            a, b = res[lib, lo], res[lib, hi]
            if a and b and a.get("status") == "ok" and b.get("status") == "ok":
                return f"{b[field] / a[field]:.2f}"
            return "-"

        for lib in libs:
            out.append(
                f"| {label(lib)} | "
                + " | ".join(cell(res[lib, L], cap) for L in depths)
                + f" | {growth(lib, 'first_s')} | {growth(lib, 'steady_s')} |"
            )
        out += ratio_rows([(res["qfx", L], {p: res[p, L] for p in peers}, TIMES) for L in depths], " | |")
        out.append("")

    if "batch" in workloads:
        print("== batch ==", file=sys.stderr)
        fwd = {lib: h.timed(lib, "batch_fwd", batch_n, batch_L, batch) for lib in libs}
        vg = {lib: h.timed(lib, "batch_vg", batch_n, batch_L, batch) for lib in libs}
        out.append(f"### 3. Batch: {batch} parameter sets of HEA(n = {batch_n}, L = {batch_L})\n")
        out.append(
            "| library | forward: first call | forward: steady "
            "| value_and_grad: first call | value_and_grad: steady |"
        )
        out.append("|---|---:|---:|---:|---:|")

        def two(r):
            c = cell(r, cap)
            return c.split(" / ", 1) if " / " in c else [c, c if c in ("-", "error") else "-"]

        for lib in libs:
            out.append(f"| {label(lib)} | " + " | ".join(two(fwd[lib]) + two(vg[lib])) + " |")
        out += ratio_rows([(d.get("qfx"), d, (f,)) for d in (fwd, vg) for f in TIMES])
        out.append("")

    if "memory" in workloads:
        print("== memory ==", file=sys.stderr)
        res = {lib: h.timed(lib, "vg", mem_n, mem_L) for lib in libs}
        out.append(f"### 4. Memory: value_and_grad of HEA(n = {mem_n}, L = {mem_L}) in a fresh process\n")
        out.append("| library | first call | steady per call | peak RSS (ru_maxrss) | RSS after imports |")
        out.append("|---|---:|---:|---:|---:|")
        for lib in libs:
            r = res[lib]
            c = cell(r, cap)
            first, steady = c.split(" / ", 1) if " / " in c else (c, "-")
            ok = r is not None and r.get("status") == "ok"
            rss = f"{r['rss_peak_mb']:.0f} MB" if ok else "-"
            base = f"{r['rss_base_mb']:.0f} MB" if ok else "-"
            out.append(f"| {label(lib)} | {first} | {steady} | {rss} | {base} |")
        q = res.get("qfx")
        out += ratio_rows([(q, res, (f,)) for f in TIMES + ("rss_peak_mb",)], " |")
        out.append("")

    # ---- report -------------------------------------------------------------------------------------
    versions = {}
    for r in h.log:
        versions.update(r.get("versions", {}))
    qfx_version = versions.get("qfx", "?")
    header = (
        f"## qfx vs peers: HEA(n, L), sum_i <Z_i>, complex64\n\n"
        f"{datetime.datetime.now().isoformat(timespec='seconds')}; {os.cpu_count()} CPUs, {cpu_name()}; "
        f"versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + "\n\n"
        f"Each config in a fresh process, no persistent compilation cache; cells are first call "
        f"(build + trace + compile + one run, imports excluded) / median steady-state call "
        f"(at least {args.repeats} calls, more while they add up to < 1 s, fewer above 1 s each). "
        f"Cap {cap:.0f} s per config: "
        f"`>{cap:.0f} s` ran out of time; `-` not run (not selected, or a smaller config of the same "
        f"library hit the cap). "
        f"Ratio = best peer time / qfx time (> 1: qfx faster). `(!)` disagrees with qfx beyond {TOL:g}.\n"
    )
    print(header)
    if check_rows:
        print(f"### Agreement with qfx at L = 2 (value and gradient, relative tolerance {TOL:g})\n")
        print("| library | " + " | ".join(f"n = {n}" for n in check_ns) + " |")
        print("|---|" + "---|" * len(check_ns))
        for lib in (x for x in libs if x != "qfx"):
            cells = []
            for n in check_ns:
                m = [(ok, msg) for (l2, n2, ok, msg) in check_rows if l2 == lib and n2 == n]
                cells.append("-" if not m else ("ok" if m[0][0] else "**FAIL**") + f" ({m[0][1]})")
            print(f"| {LIBRARIES[lib][0]} | " + " | ".join(cells) + " |")
        print()
    print("\n".join(out))
    total = time.perf_counter() - start
    print(f"total {total:.0f} s, qfx {qfx_version}")
    if h.invalid:
        print("\n!!! INVALID (disagree with qfx): " + "; ".join(f"{k}: {v}" for k, v in h.invalid.items()))

    path = args.out or os.path.join(
        HERE,
        "results",
        f"peers-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}{'-quick' if args.quick else ''}.json",
    )
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    meta = dict(
        date=datetime.datetime.now().isoformat(timespec="seconds"),
        cpu=cpu_name(),
        cpus=os.cpu_count(),
        python_qfx=sys.executable,
        python_peers=args.peers_python,
        args=vars(args),
        versions=versions,
        invalid=h.invalid,
        check=[dict(library=l2, n=n2, ok=ok, msg=msg) for (l2, n2, ok, msg) in check_rows],
        total_s=total,
    )
    with open(path, "w") as f:
        json.dump(dict(meta=meta, results=h.log, tables="\n".join(out)), f, indent=1)
    with open(os.path.splitext(path)[0] + ".md", "w") as f:  # the printed tables, for reading and diffs
        f.write("\n".join(out) + "\n")
    print(f"raw results: {path} (tables: .md beside it)")


if __name__ == "__main__":
    main()
