"""Regenerate hw/energy/data/16nm.toml and 7nm.toml from 45nm.toml (sources, DRAM, links) plus

* 7 nm: Jouppi et al. ISCA 2021 Table 2 values (typed in below) and bit-cell-scaled areas;
* 16 nm: log-node interpolation between the 45 nm and 7 nm values, rounded to 3 digits.

Run from anywhere: python scripts/gen_energy_tables.py (tests/hw/test_energy.py checks the result).
"""
import os
os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hw", "energy", "data"))

import math
base = open('45nm.toml').read()
head_sources = base[base.index('\n[sources]\n')+1:base.index('# ---- arithmetic')]
rest_common = base[base.index('# ---- DRAM'):base.index('# ---- area')]
def g(x): return float(f"{x:.3g}")
def area(scale, bitcell, bitsrc):
    s=lambda v: g(v*scale)
    d=f'derived: horowitz2014 x {scale:.4f} (bit-cell ratio {bitsrc} / mistry2007)'
    return f'''# ---- area (for static power and area reports) ----------------------------------------------------
# Logic areas: horowitz2014's 45 nm areas scaled by the SRAM bit-cell area ratio {bitcell} / 0.346
# (logic and SRAM density scale alike to first order between these nodes).
[area]
int_add_um2 = {{ bits = [8, 16, 32], um2 = [{s(36)}, {s(67)}, {s(137)}], source = "{d}" }}
int_mult_um2 = {{ bits = [8, 32], um2 = [{s(282)}, {s(3495)}], source = "{d}" }}
fp16_add_um2 = {{ value = {s(1360)}, source = "{d}" }}
fp32_add_um2 = {{ value = {s(4184)}, source = "{d}" }}
fp16_mult_um2 = {{ value = {s(1640)}, source = "{d}" }}
fp32_mult_um2 = {{ value = {s(7700)}, source = "{d}" }}
sram_bitcell_um2 = {{ value = {bitcell}, source = "{bitsrc}" }}
sram_array_efficiency = {{ value = 0.7, source = "estimate: bit cells take about 70 % of a compiled SRAM macro (decoders, sense amplifiers, I/O take the rest)" }}
'''
extra_src7 = 'wu2016 = "S.-Y. Wu et al. (TSMC), \'A 7nm CMOS platform technology featuring 4th generation FinFET transistors with a 0.027um2 high density 6-T SRAM cell for mobile SoC applications\', IEDM 2016"\n'
extra_src16 = 'wu2013 = "S.-Y. Wu et al. (TSMC), \'A 16nm FinFET CMOS technology for mobile SoC and computing applications\', IEDM 2013: 0.07 um2 high-density 6-T SRAM cell"\n'
leak = lambda v, txt: f'''# ---- static power ------------------------------------------------------------------------------------
[static]
leakage_mw_per_mm2 = {{ value = {v}, source = "{txt}" }}
'''
wtr = 'write_to_read = { value = 1.0, source = "estimate: a write drives the same bit lines as a read; CACTI reports write energy within about 10 % of read energy for small arrays" }'
hdr = '''#
# Every number has a `source`: a key of the sources table (a published figure, transcribed as
# published), or "derived: ..." (computed from cited figures, the rule written out), or
# "estimate: ..." (no primary source we could check; the reasoning is written out). Edit any value;
# `npulab run --tech FILE` uses your copy. Units are in the key names (pj = picojoule, um2 = square
# micrometre).
'''
seven = f'''# npulab energy table: 7 nm FinFET (Jouppi et al., ISCA 2021, updating Horowitz's table to 7 nm).
{hdr}
[technology]
name = "7nm"
node_nm = 7
description = "7 nm FinFET: Jouppi et al.'s (TPUv4i, ISCA 2021) update of Horowitz's table"

{head_sources.rstrip()}
{extra_src7}
# ---- arithmetic: pJ per operation ----------------------------------------------------------
# Widths between table entries: power-law interpolation (see 45nm.toml).
[ops]
int_add = {{ bits = [8, 32], pj = [0.007, 0.03], source = "jouppi2021" }}
int_mult = {{ bits = [8, 32], pj = [0.07, 1.48], source = "jouppi2021" }}
fp16_add = {{ pj = 0.16, source = "jouppi2021" }}
fp32_add = {{ pj = 0.38, source = "jouppi2021" }}
fp16_mult = {{ pj = 0.34, source = "jouppi2021" }}
fp32_mult = {{ pj = 1.31, source = "jouppi2021" }}

# ---- PE registers / register file ------------------------------------------------------------
[register]
pj_per_bit = {{ value = 0.0009375, source = "derived: one flip-flop bit ~ one full-adder bit: jouppi2021 32-bit add 0.03 pJ / 32" }}

# ---- SRAM: energy of one 64-bit read (fit and use as in 45nm.toml) -----------------------------
[sram]
capacity_kib = [8, 32, 1024]
read_pj_per_64b = [7.5, 8.5, 14.0]
source = "jouppi2021"
{wtr}

{rest_common.rstrip()}

{area(0.027/0.346, 0.027, 'wu2016')}
{leak(10.0, 'estimate: FinFET leakage per mm2 at nominal voltage, same order as 16 nm (higher density, lower leakage per device); edit for your library')}'''
open('7nm.toml','w').write(seven)
t = math.log(45/16)/math.log(45/7)
ip = lambda a,b: g(a*(b/a)**t)
D = "derived: log-node interpolation of horowitz2014 and jouppi2021"
sixteen = f'''# npulab energy table: 16 nm FinFET class, interpolated between the 45 nm (Horowitz, ISSCC 2014) and
# 7 nm (Jouppi et al., ISCA 2021) tables.
#
# Arithmetic, register and SRAM energies: log-node interpolation, E16 = E45 * (E7 / E45)^t with
# t = ln(45/16) / ln(45/7) = {t:.4f} (energy per operation falls geometrically with the node between the
# two published points), rounded to 3 significant digits; tests/hw/test_energy.py checks that they
# equal the interpolation of the two source files. DRAM and link energies do not depend on the
# logic node and are the same in every file.
{hdr}
[technology]
name = "16nm"
node_nm = 16
description = "16 nm FinFET class: log-node interpolation between Horowitz 45 nm and Jouppi 7 nm"

{head_sources.rstrip()}
{extra_src16}
# ---- arithmetic: pJ per operation ----------------------------------------------------------
[ops]
int_add = {{ bits = [8, 32], pj = [{ip(0.03,0.007)}, {ip(0.1,0.03)}], source = "{D}" }}
int_mult = {{ bits = [8, 32], pj = [{ip(0.2,0.07)}, {ip(3.1,1.48)}], source = "{D}" }}
fp16_add = {{ pj = {ip(0.4,0.16)}, source = "{D}" }}
fp32_add = {{ pj = {ip(0.9,0.38)}, source = "{D}" }}
fp16_mult = {{ pj = {ip(1.1,0.34)}, source = "{D}" }}
fp32_mult = {{ pj = {ip(3.7,1.31)}, source = "{D}" }}

# ---- PE registers / register file ------------------------------------------------------------
[register]
pj_per_bit = {{ value = {g(ip(0.1,0.03)/32)}, source = "derived: one flip-flop bit ~ one full-adder bit: 32-bit add (log-node interpolation of horowitz2014 and jouppi2021) / 32" }}

# ---- SRAM: energy of one 64-bit read (fit and use as in 45nm.toml) -----------------------------
[sram]
capacity_kib = [8, 32, 1024]
read_pj_per_64b = [{ip(10,7.5)}, {ip(20,8.5)}, {ip(100,14)}]
source = "{D}"
{wtr}

{rest_common.rstrip()}

{area(0.07/0.346, 0.07, 'wu2013')}
{leak(10.0, 'estimate: FinFET leakage per mm2 at nominal voltage, room to warm temperature; edit for your library')}'''
open('16nm.toml','w').write(sixteen)
