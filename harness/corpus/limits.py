"""The limits a case file must keep (cases/README.md, "Limits"), in one place.

Each bounds what loading or judging one file may cost, so that a hostile or
mistaken file is an ``error`` for that file and never stops a run. The numbers were
chosen from the corpus of 2026-12-03 (269 files): its largest case file is 7,844 bytes,
its deepest nesting 10 levels (4 bracket levels), its largest single-step case holds
640,000 logits (20 rows of 32,000), its largest scenario 2,048 model logits
(``max_steps`` 32 x 4 requests of vocab 16) and its statistical scenario 16,000 (4,000
draws of vocab 4). The limits leave 134 times that room for the file size, 3.2 times for the
nesting, 6.5 times for a case's logits and 1,000 times or more for a scenario's.
"""

from __future__ import annotations

from impls.params import MAX_SEED_CHARS, MAX_VOCAB

__all__ = ["MAX_FILE_BYTES", "MAX_NESTING", "INT_MIN", "INT_MAX", "MAX_VOCAB", "MAX_CASE_LOGITS",
           "MAX_SCENARIO_LOGITS", "MAX_SEED_CHARS", "MAX_ROW_INDEX_DIGITS"]

#: Bytes of one case file (read no further: a larger file is refused before parsing).
#: Loading a file of this size takes at most about 4 s on the 2-core development machine
#: (measured 2026-12-03: 2.5 s for one row of 262,000 literal logits, 3.9 s for 24,961
#: one-token rows, 4.0 s for 19,780 rows with an ``expect``; parsing alone, 2.9 s for one
#: flat array of 500,000 integers).
MAX_FILE_BYTES = 1 << 20
#: Levels of arrays and tables (``[``/``{`` brackets, and the parts of one dotted key or
#: table header), checked on the text before :mod:`tomllib` parses it (its recursion ends
#: near 500 bracket levels; its dotted keys take time quadratic in their parts), and on the
#: parsed document (dotted keys inside nested tables add up).
MAX_NESTING = 32
#: TOML integers are 64-bit signed (TOML 1.0, "Integer"); :mod:`tomllib` reads any size.
INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1
#: Logits of a single-step case, literal and generated, over every row of every batch
#: (16 MiB as float32); one row is at most :data:`MAX_VOCAB`.
MAX_CASE_LOGITS = 1 << 22
#: Model logits a scenario may ask for: the sum over requests of vocab x ``max_steps`` x
#: beam width x (1 + ``draft_len``), and for a statistical scenario ``draws`` x vocab
#: (the bound of one batched call of :meth:`harness.judge.Judge.draw_counts`).
MAX_SCENARIO_LOGITS = 1 << 24
#: Digits of a row index in an invariant's ``"batch:index"``.
MAX_ROW_INDEX_DIGITS = 9
