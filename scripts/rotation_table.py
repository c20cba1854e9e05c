#!/usr/bin/env python3
"""rotation_table.py — the quality table of docs/quantize.md "Quality with
the online Hadamard (R4) and through GGUF": tinystories-656k, methods RTN,
GPTQ, GPTAQ, GPTQ+QEP, each without rotation, with R1 (--rotate hadamard)
and with R1 + R4 (--rotate hadamard-r4), at 4, 3 and 2 bits, group 128 and
-1, asymmetric, the reference calibration ids (128 x 128).

Per row: `lowbit quantize` writes a checkpoint (bits/weight of the GPTQ
layout from --json); `lowbit ppl` on it (full protocol, ctx 256, the 30 KB
TinyStories validation head, --gptq-mode f32: exact dequantized weights);
`lowbit export` (auto mode: direct where the codes map to a GGUF type,
otherwise mixed/fallback; a rotated checkpoint's down_proj is folded back
and re-quantized on the fallback route) and `lowbit ppl` on the GGUF (same
protocol; lowbit's W4A8-style kernels quantize activations per block). The
GGUF bits/weight is over the 14 linears only (from `lowbit plan --json`).

    python3 scripts/rotation_table.py [OUT.md] [--quick]

Rows are appended to OUT.md (default /tmp/rotation_table.md) as they are
measured, so a partial run is usable; --quick: 4-bit group 128 only.
Needs ./build/lowbit (LOWBIT overrides) and ../shared (LB_SHARED).
"""
import json, os, subprocess, sys, tempfile, time, shutil

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(root)
LB = os.environ.get("LOWBIT", "./build/lowbit")
SH = os.environ.get("LB_SHARED", "../shared")
MODEL = f"{SH}/models/tinystories-656k"
CAL = f"{SH}/reference/gptq_model/calib_ids.i32"
TEXT = f"{SH}/reference/ppl/texts/tinystories-valid-head30k.lf.txt"
args = [a for a in sys.argv[1:] if not a.startswith("--")]
OUT = args[0] if args else "/tmp/rotation_table.md"
QUICK = "--quick" in sys.argv

METHODS = [("RTN", ["--method", "rtn"]), ("GPTQ", ["--method", "gptq"]),
           ("GPTAQ", ["--method", "gptaq"]), ("GPTQ+QEP", ["--method", "gptq", "--qep"])]
ROTS = [("none", []), ("R1", ["--rotate", "hadamard"]), ("R1+R4", ["--rotate", "hadamard-r4"])]
BPW = {"Q4_0": 4.5, "Q4_1": 5.0, "Q5_0": 5.5, "Q5_1": 6.0, "Q8_0": 8.5, "Q2_K": 2.625,
       "Q3_K": 3.4375, "Q4_K": 4.5, "Q5_K": 5.5, "Q6_K": 6.5625, "F16": 16.0, "F32": 32.0,
       "BF16": 16.0}


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def ppl(path, extra):
    out = run([LB, "ppl", path, "--text-file", TEXT, "--ctx", "256", "--protocol", "full",
               "-t", "2", "-q"] + extra)
    for line in out.splitlines():
        if "PPL = " in line:
            return float(line.split("PPL = ")[1].split()[0])
    raise RuntimeError("no PPL in: " + out)


def main():
    w = tempfile.mkdtemp(prefix="lb-rot-table.")
    new = not os.path.exists(OUT)
    with open(OUT, "a") as f:
        if new:
            f.write("| method | bits | group | rotation | ckpt ppl | ckpt bits/weight | GGUF routes "
                    "(direct/mixed/fallback) | GGUF types | GGUF bits/weight | GGUF ppl |\n"
                    "|---|---|---|---|---|---|---|---|---|---|\n")
        groups = [128] if QUICK else [128, -1]
        bits_l = [4] if QUICK else [4, 3, 2]
        try:
            for g in groups:
                for b in bits_l:
                    for name, margs in METHODS:
                        for rname, rargs in ROTS:
                            d = os.path.join(w, "ckpt")
                            shutil.rmtree(d, ignore_errors=True)
                            t0 = time.time()
                            q = json.loads(run([LB, "--json", "quantize", MODEL, "-o", d, "--asym",
                                                "--bits", str(b), "--group-size", str(g),
                                                "--calib-ids", CAL, "--seqlen", "128", "-t", "2"]
                                               + margs + rargs))
                            pc = ppl(d, ["--gptq-mode", "f32"])
                            plan = json.loads(run([LB, "--json", "plan", d]))
                            lin = [t for t in plan["tensors"]
                                   if t["route"] in ("direct", "mixed", "fallback")]
                            n = sum(t["shape"][0] * t["shape"][1] for t in lin)
                            bpw = sum(BPW[t["type"]] * t["shape"][0] * t["shape"][1]
                                      for t in lin) / n
                            r = plan["routes"]
                            types = "/".join(sorted({t["type"] for t in lin}))
                            gg = os.path.join(w, "m.gguf")
                            if os.path.exists(gg):
                                os.remove(gg)
                            run([LB, "--quiet", "export", d, "-o", gg])
                            pg = ppl(gg, [])
                            row = (f"| {name} | {b} | {g} | {rname} | {pc:.4f} | "
                                   f"{q['bits_per_weight']:.3f} | {r['direct']}/{r['mixed']}/"
                                   f"{r['fallback']} | {types} | {bpw:.3f} | {pg:.4f} |")
                            f.write(row + "\n")
                            f.flush()
                            print(row, f"({time.time() - t0:.0f} s)", flush=True)
        finally:
            shutil.rmtree(w, ignore_errors=True)


if __name__ == "__main__":
    main()
