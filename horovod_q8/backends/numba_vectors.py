"""Steps of the Numba kernels written as LLVM vector IR (`numba.extending.intrinsic`), where
LLVM's loop vectoriser leaves a loop scalar: the 8-bit search's and the decodes' table reads.

The IR names no instruction set (vector loads and stores, `extractelement`/`insertelement`,
`llvm.prefetch`): LLVM lowers it to AVX2 or AVX-512 on x86-64 and to NEON on AArch64, so the
Numba path stays the path for any CPU without a C compiler. It assumes a little-endian target
(x86-64, AArch64, ppc64le), as the rest of the codec does: the search's keys leave the vector as
64-bit words, the first key in the low half, and a decode's codes come in as one integer, the
first code in its lowest bits. Byte-for-byte the same as
`formats.reference`: the IEEE division and the carry table of `cpu_kernels._nearest_carry`.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

LANES = 8
DECODE, ACCUMULATE, PAIR = 0, 1, 2  # what a decode step writes (cpu_kernels.decode's modes)
CODES_STEP = 4 * LANES  # elements per carry_codes: four divisions issued before the first table read
PREFETCH_AHEAD = 2048  # floats (8 KB) ahead of the codes step: the next block's absmax reads them from cache

_I8, _I32, _I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_V32 = ir.VectorType(_I32, LANES)
_VF = ir.VectorType(ir.FloatType(), LANES)
_V8 = ir.VectorType(_I8, LANES)


def _contiguous(a, dtype) -> bool:
    return isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and a.dtype == dtype


def _splat(builder: ir.IRBuilder, value: ir.Value, vty: ir.VectorType) -> ir.Value:
    v = builder.insert_element(ir.Constant(vty, ir.Undefined), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(v, ir.Constant(vty, ir.Undefined), ir.Constant(_V32, [0] * LANES))


def _const(value: int) -> ir.Constant:
    return ir.Constant(_V32, [value] * LANES)


def _prefetch(builder: ir.IRBuilder, address: ir.Value) -> None:
    """llvm.prefetch(address) for reading into all cache levels; never faults, even past the end."""
    module = builder.module
    fn = module.globals.get("llvm.prefetch")
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_I8.as_pointer(), _I32, _I32, _I32]), "llvm.prefetch")
    builder.call(fn, [builder.bitcast(address, _I8.as_pointer()), ir.Constant(_I32, 0), ir.Constant(_I32, 3),
                      ir.Constant(_I32, 1)])


def _table_reads(builder: ir.IRBuilder, table: ir.Value, keys: ir.Value) -> ir.Value:
    """<8 x i32> table[keys]: the keys leave the vector as four 64-bit words (fewer extracts
    than eight 32-bit ones) and the entries enter it one by one."""
    words = builder.bitcast(keys, ir.VectorType(_I64, LANES // 2))
    out = ir.Constant(_V32, ir.Undefined)
    for q in range(LANES // 2):
        w = builder.extract_element(words, ir.Constant(_I32, q))
        for r, key in enumerate((builder.and_(w, ir.Constant(_I64, 0xFFFFFFFF)), builder.lshr(w, ir.Constant(_I64, 32)))):
            entry = builder.load(builder.gep(table, [key]), align=4)
            out = builder.insert_element(out, entry, ir.Constant(_I32, 2 * q + r))
    return out


@intrinsic
def carry_codes(typingctx, x, i, scale, carry, codes):
    """codes[i:i+32] = count(mids < x[i:i+32] / scale) for an 8-bit table: (carry[bits >> 16] +
    low) >> 16, low being the quotient's low 16 bits, inverted where it is negative
    (codebooks.carry_table). Prefetches x PREFETCH_AHEAD floats ahead. The caller keeps
    i + CODES_STEP <= len(x), len(codes). codes: uint8, or int32 (typed for kernels that also
    take narrower codes through an int32 buffer)."""
    if not (_contiguous(x, types.float32) and isinstance(i, types.Integer) and scale == types.float32
            and _contiguous(carry, types.uint32)
            and (_contiguous(codes, types.uint8) or _contiguous(codes, types.int32))):
        return None
    out_type = _V8 if codes.dtype == types.uint8 else _V32

    def codegen(context, builder, sig, args):
        xa = context.make_array(sig.args[0])(context, builder, args[0])
        ta = context.make_array(sig.args[3])(context, builder, args[3])
        ca = context.make_array(sig.args[4])(context, builder, args[4])
        at0 = args[1]
        sv = _splat(builder, args[2], _VF)
        bs = []
        for q in range(CODES_STEP // LANES):
            at = builder.add(at0, ir.Constant(at0.type, LANES * q))
            if q % 2 == 0:  # a 64-byte line per two vectors
                _prefetch(builder, builder.gep(xa.data, [builder.add(at, ir.Constant(at.type, PREFETCH_AHEAD))]))
            xv = builder.load(builder.bitcast(builder.gep(xa.data, [at]), _VF.as_pointer()), align=4)
            bs.append(builder.bitcast(builder.fdiv(xv, sv), _V32))
        cs = []
        for b in bs:
            low = builder.and_(builder.xor(b, builder.ashr(b, _const(31))), _const(0xFFFF))
            entries = _table_reads(builder, ta.data, builder.lshr(b, _const(16)))
            cs.append(builder.lshr(builder.add(entries, low), _const(16)))
        # the four vectors joined before narrowing: one pack sequence and one store per step
        # rather than per vector (on AVX2 each lone narrowing takes a shuffle and a permute)
        halves = [builder.shuffle_vector(cs[k], cs[k + 1], ir.Constant(ir.VectorType(_I32, 2 * LANES), list(range(2 * LANES))))
                  for k in (0, 2)]
        c = builder.shuffle_vector(halves[0], halves[1], ir.Constant(ir.VectorType(_I32, CODES_STEP), list(range(CODES_STEP))))
        vty = ir.VectorType(out_type.element, CODES_STEP)
        if out_type is _V8:
            c = builder.trunc(c, vty)
        builder.store(c, builder.bitcast(builder.gep(ca.data, [at0]), vty.as_pointer()), align=1)
        return context.get_dummy_value()

    return types.void(x, i, scale, carry, codes), codegen


def _table_values(builder: ir.IRBuilder, codes: ir.Value, at: ir.Value, bits: int, table: ir.Value) -> ir.Value:
    """<8 x float> table[codes of elements at .. at + 7], `bits`-bit codes packed first in the
    lowest bits (at a multiple of 8 / bits): the eight codes come in as one integer load of
    `bits` bytes and leave it by shifts, no vector extracts."""
    byte = builder.lshr(builder.mul(at, ir.Constant(at.type, bits)), ir.Constant(at.type, 3))
    word = builder.load(builder.bitcast(builder.gep(codes, [byte]), ir.IntType(8 * bits).as_pointer()), align=1)
    word = builder.zext(word, _I64) if bits < 8 else word
    table32 = builder.bitcast(table, _I32.as_pointer())
    v = ir.Constant(_V32, ir.Undefined)
    for q in range(LANES):
        key = builder.and_(builder.lshr(word, ir.Constant(_I64, bits * q)), ir.Constant(_I64, (1 << bits) - 1))
        v = builder.insert_element(v, builder.load(builder.gep(table32, [key]), align=4), ir.Constant(_I32, q))
    return builder.bitcast(v, _VF)


def _decode_step(bits: int, mode: int):
    """The intrinsic step(codes, codes1, i, table, table1, post, out) for elements i .. i + 7 of
    `bits`-bit codes (i a multiple of 8 / bits; the caller keeps the codes and out in range):
    DECODE: out = table[code]; ACCUMULATE: out = (out + table[code]) * post; PAIR: out =
    (table[code] + table1[code1]) * post, in float32 as `cpu_kernels._decode_one` (codes1 and
    table1 are read in PAIR mode alone, post not in DECODE mode)."""

    def step(typingctx, codes, codes1, i, table, table1, post, out):
        if not (_contiguous(codes, types.uint8) and _contiguous(codes1, types.uint8) and isinstance(i, types.Integer)
                and _contiguous(table, types.float32) and _contiguous(table1, types.float32)
                and post == types.float32 and _contiguous(out, types.float32)):
            return None

        def codegen(context, builder, sig, args):
            ca, c1a, ta, t1a, oa = (context.make_array(sig.args[k])(context, builder, args[k]) for k in (0, 1, 3, 4, 6))
            at = context.cast(builder, args[2], sig.args[2], types.int64)  # at * bits must not wrap
            v = _table_values(builder, ca.data, at, bits, ta.data)
            target = builder.bitcast(builder.gep(oa.data, [at]), _VF.as_pointer())
            if mode == PAIR:
                v = builder.fadd(v, _table_values(builder, c1a.data, at, bits, t1a.data))
            elif mode == ACCUMULATE:
                v = builder.fadd(builder.load(target, align=4), v)
            if mode != DECODE:
                v = builder.fmul(v, _splat(builder, args[5], _VF))
            builder.store(v, target, align=4)
            return context.get_dummy_value()

        return types.void(codes, codes1, i, table, table1, post, out), codegen

    step.__name__ = f"decode{bits}_{('plain', 'accumulate', 'pair')[mode]}"
    return intrinsic(step)


# Plain stores: non-temporal ones, as the native kernels write large outputs, made 25.6M decoded
# values slower here (8.68 against 7.15 ms, Zen 4, docs/performance.md).
decode8, accumulate8, pair8 = (_decode_step(8, m) for m in (DECODE, ACCUMULATE, PAIR))
decode4, accumulate4 = (_decode_step(4, m) for m in (DECODE, ACCUMULATE))
decode2, accumulate2 = (_decode_step(2, m) for m in (DECODE, ACCUMULATE))  # pairs of narrow codes: cpu_kernels._pair_packed
