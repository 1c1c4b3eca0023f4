"""The fused sampler's tuning options by kind: one place for what :func:`impls.fused.ops.apply_tuning` checks and
what :func:`impls.fused.launch.plan_key` must tell apart (``ops`` imports ``launch``, so neither can hold them for
the other). The options themselves, their values and measurements: :data:`impls.fused.ops.DEFAULTS`."""

__all__ = ["BOOL_OPTIONS", "POW2_OPTIONS", "BOOL_OR_INT"]

#: Tuning options that are True or False.
BOOL_OPTIONS = ("local", "unit_t", "warp_lists", "pdl", "one_list", "seg_lists", "packed_read")
#: Tuning constants that size Triton blocks (``tl.arange`` needs powers of two).
POW2_OPTIONS = ("block", "nb", "nbs", "kmax", "kbig", "kbr", "nsub")
#: Tuning options that take True, False or an int, whose ``True`` and ``1`` differ (``early=True``: every batch,
#: ``early=1``: batches of one row) though they compare and hash equal: a plan's key keys their types too.
BOOL_OR_INT = ("early", "lane_hist")
