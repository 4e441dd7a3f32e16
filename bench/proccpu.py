#!/usr/bin/env python3
"""Run a command and report the machine's busy CPU and the CPU seconds of
PostgreSQL's processes while it ran, sampled from /proc every
0.2 s (bench/RESULTS.md, "The state of a fleet"). Usage: proccpu.py CMD [ARGS...]"""
import os, subprocess, sys, time
tick = os.sysconf('SC_CLK_TCK')
def machine():
    f = open('/proc/stat').readline().split()[1:]
    v = list(map(int, f))
    busy = v[0]+v[1]+v[2]+v[5]+v[6]+v[7]
    return busy, busy+v[3]+v[4]
seen = {}
def sample():
    for p in os.listdir('/proc'):
        if not p.isdigit(): continue
        try:
            s = open(f'/proc/{p}/stat').read()
        except OSError: continue
        name = s[s.index('(')+1:s.rindex(')')]
        rest = s[s.rindex(')')+2:].split()
        cpu = int(rest[11]) + int(rest[12])
        seen[(p, name)] = cpu
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, text=True)
b0, t0 = machine(); w0 = time.time()
base = None
while proc.poll() is None:
    sample()
    if base is None: base = dict(seen)
    time.sleep(0.2)
b1, t1 = machine(); w1 = time.time()
out = proc.stdout.read()
print(out)
pg = sum(v - base.get(k, 0) for k, v in seen.items() if k[1] == 'postgres') / tick
print(f"wall {w1-w0:.1f}s machine busy {(b1-b0)/tick:.1f} cpu-s of {(t1-t0)/tick:.1f} ({100*(b1-b0)/(t1-t0):.0f}%); postgres processes {pg:.1f} cpu-s")
