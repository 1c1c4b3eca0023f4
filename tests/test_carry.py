"""benchmarks/carry.py: the trimmed wheels the GPU machine installs (no network, no device here)."""

import zipfile

from benchmarks.carry import FLASHINFER_DROP, FLASHINFER_KEEP, trim_wheel


def test_trim_wheel_drops_members_and_their_record_lines(tmp_path):
    src, dst = tmp_path / "fi-1-py3-none-any.whl", tmp_path / "out.whl"
    names = ["flashinfer/sampling.py", "flashinfer/data/csrc/cake_dsv4/a.cu",
             "flashinfer/data/csrc/cake_blackwell_softmax.cu", "flashinfer/data/csrc/kda/b.cu",
             "flashinfer/fused_moe/alphamoe_sm100.py",  # imported by flashinfer/__init__.py: kept
             "flashinfer/data/csrc/alphamoe/k.cu", "flashinfer/data/csrc/sampling.cu"]
    record = "".join(f"{n},sha256=x,1\n" for n in names) + "fi-1.dist-info/RECORD,,\n"
    with zipfile.ZipFile(src, "w") as z:
        for n in names:
            z.writestr(n, "1")
        z.writestr("fi-1.dist-info/RECORD", record)
    n, size = trim_wheel(src, dst, FLASHINFER_DROP, FLASHINFER_KEEP)
    with zipfile.ZipFile(dst) as z:
        kept = z.namelist()
        rec = z.read("fi-1.dist-info/RECORD").decode()
    assert n == 3 and size == dst.stat().st_size
    assert kept == ["flashinfer/sampling.py", "flashinfer/data/csrc/cake_blackwell_softmax.cu",
                    "flashinfer/fused_moe/alphamoe_sm100.py", "flashinfer/data/csrc/sampling.cu",
                    "fi-1.dist-info/RECORD"]
    assert rec == ("flashinfer/sampling.py,sha256=x,1\nflashinfer/data/csrc/cake_blackwell_softmax.cu,sha256=x,1\n"
                   "flashinfer/fused_moe/alphamoe_sm100.py,sha256=x,1\nflashinfer/data/csrc/sampling.cu,sha256=x,1\n"
                   "fi-1.dist-info/RECORD,,\n")
