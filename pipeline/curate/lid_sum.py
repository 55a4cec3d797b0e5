"""Rows summed with the sum held in registers (curate/lid_ops.py's word n-grams call `_add_rows`;
pure: no I/O): x += rows[ids[a]], ..., rows[ids[b - 1]], in that order, in float32.

numba keeps x in memory between two rows (it cannot tell that x is no row), so each addition
waits for the one before it through a store and a load; here up to GROUP 16-lane vectors of x
are loaded once, the rows added to them in registers and x stored once. Each lane's additions
are those of the scalar loop, in the same order: every value is the same. A row's lines are
asked for (prefetched) `ahead` rows before it is added: a row of a large table is rarely in the
cache, and its loads then overlap.
"""

from __future__ import annotations

import numpy as np

from pipeline.curate.lid_ops import LANES, _jit, _leaf, _prefetch
from pipeline.dedup import kernel_cache

kernel_cache.install_locator()  # before the first njit: where numba caches these loops
kernel_cache.key_also(__file__, "lid_ops.py")  # the loop below calls lid_ops's

try:
    import numba
    import numba.extending
    from llvmlite import ir
    from numba.core import cgutils

    _intrinsic = numba.extending.intrinsic
except ImportError:  # pragma: no cover - exercised where numba is not installed
    numba = None
    _intrinsic = _jit

GROUP = 4  # 16-lane vectors held at once: a 64-wide row in one pass


def _summer(vectors: int):
    """The intrinsic that adds, to x[j:j + 16 * vectors], the same columns of rows[ids[a]], ...,
    rows[ids[b - 1]] in that order (x held in registers), each row's lines of those columns
    asked for `ahead` rows before and, where far > ahead, into L2 `far` rows before (j + 16 *
    vectors <= the row width; rows C-contiguous)."""

    def add_rows(typingctx, x, j, rows, ids, a, b, ahead, far):
        sig = numba.types.void(x, j, rows, ids, a, b, ahead, far)

        def codegen(context, builder, sig, args):
            i64, f32 = ir.IntType(64), ir.FloatType()
            lanes = ir.VectorType(f32, LANES)
            cast = lambda k: context.cast(builder, args[k], sig.args[k], numba.types.int64)  # noqa: E731
            j, a, b, ahead, far = cast(1), cast(4), cast(5), cast(6), cast(7)
            xa = context.make_array(sig.args[0])(context, builder, args[0])
            ra = context.make_array(sig.args[2])(context, builder, args[2])
            ia = context.make_array(sig.args[3])(context, builder, args[3])
            width = cgutils.unpack_tuple(builder, ra.shape)[1]
            at = builder.gep(xa.data, [j])
            held = [builder.bitcast(builder.gep(at, [ir.Constant(i64, LANES * v)]),
                                    lanes.as_pointer()) for v in range(vectors)]  # fmt: skip
            sums = [builder.load(p, align=4) for p in held]
            byte = ir.IntType(8).as_pointer()
            hint = ir.FunctionType(ir.VoidType(), [byte, *[ir.IntType(32)] * 3])
            prefetch = builder.module.declare_intrinsic("llvm.prefetch", [byte], hint)
            flags = [ir.Constant(ir.IntType(32), v) for v in (0, 3, 1)]  # read, keep, data
            to_l2 = [ir.Constant(ir.IntType(32), v) for v in (0, 2, 1)]  # not into L1

            def row_start(r):  # &rows[ids[r], j]
                t = builder.sext(builder.load(builder.gep(ia.data, [r])), i64)
                return builder.gep(ra.data, [builder.add(builder.mul(t, width), j)])

            before = builder.basic_block
            head = builder.append_basic_block("rows.head")
            body = builder.append_basic_block("rows.body")
            early = builder.append_basic_block("rows.prefetch")
            check = builder.append_basic_block("rows.far_check")
            earlier = builder.append_basic_block("rows.far")
            add = builder.append_basic_block("rows.add")
            done = builder.append_basic_block("rows.done")
            builder.branch(head)
            builder.position_at_end(head)
            r = builder.phi(i64)
            r.add_incoming(a, before)
            acc = [builder.phi(lanes) for _ in range(vectors)]
            for phi, start in zip(acc, sums, strict=True):
                phi.add_incoming(start, before)
            builder.cbranch(builder.icmp_signed("<", r, b), body, done)
            builder.position_at_end(body)
            later = builder.add(r, ahead)
            builder.cbranch(builder.icmp_signed("<", later, b), early, add)
            builder.position_at_end(early)
            line = row_start(later)
            for v in range(vectors):
                point = builder.bitcast(builder.gep(line, [ir.Constant(i64, LANES * v)]), byte)
                builder.call(prefetch, [point, *flags])
            builder.branch(check)
            builder.position_at_end(check)
            farther = builder.add(r, far)
            wanted = builder.and_(builder.icmp_signed(">", far, ahead),
                                  builder.icmp_signed("<", farther, b))  # fmt: skip
            builder.cbranch(wanted, earlier, add)
            builder.position_at_end(earlier)
            line = row_start(farther)
            for v in range(vectors):
                point = builder.bitcast(builder.gep(line, [ir.Constant(i64, LANES * v)]), byte)
                builder.call(prefetch, [point, *to_l2])
            builder.branch(add)
            builder.position_at_end(add)
            line = row_start(r)
            new = []
            for v in range(vectors):
                point = builder.bitcast(builder.gep(line, [ir.Constant(i64, LANES * v)]),
                                        lanes.as_pointer())  # fmt: skip
                new.append(builder.fadd(acc[v], builder.load(point, align=4)))
            for phi, value in zip(acc, new, strict=True):
                phi.add_incoming(value, add)
            r.add_incoming(builder.add(r, ir.Constant(i64, 1)), add)
            builder.branch(head)
            builder.position_at_end(done)
            for p, value in zip(held, acc, strict=True):
                builder.store(value, p, align=4)
            return context.get_dummy_value()

        return sig, codegen

    add_rows.__name__ = f"_add_rows{vectors}"
    return _intrinsic(add_rows)


_add_rows4, _add_rows1 = _summer(GROUP), _summer(1)


@_leaf
def _add_rows(x, rows, ids, a, b, ahead, far):
    """x += rows[ids[a]], ..., rows[ids[b - 1]], in that order, each lane's float32 additions
    those of the scalar loop; each row's lines asked for `ahead` rows before it is added (into
    every cache level) and, where far > ahead, `far` rows before (into L2: rows rarely in the
    cache, more of them in flight than L1 has room for)."""
    dim = x.shape[0]
    for r in range(a, min(a + max(ahead, far), b)):  # the first rows' lines, asked for now
        for k in range(0, dim, LANES):
            _prefetch(rows, np.int64(ids[r]) * dim + k)
    j = 0
    while j + GROUP * LANES <= dim:
        _add_rows4(x, j, rows, ids, a, b, ahead, far)
        j += GROUP * LANES
    while j + LANES <= dim:
        _add_rows1(x, j, rows, ids, a, b, ahead, far)
        j += LANES
    if j < dim:  # the last dim % 16 columns, one by one
        for r in range(a, b):
            for k in range(j, dim):
                x[k] += rows[ids[r], k]
