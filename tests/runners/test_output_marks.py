"""Where each test's output starts: output a run wrote before a channel record lies before
that record's mark, however far behind the readers of its pipes are (a slow live view, a
loaded machine), so a killed test's quoted output never begins with an earlier test's.

The mark is taken when the record is read, so output written after the record but before
that moment lies before it too: a quote may miss a test's first lines, never show another's.
"""

from __future__ import annotations

import shutil
import time

from devloop.core.config import Settings
from devloop.runners.channel import Channel, OutputCount
from devloop.sandbox import BwrapSandbox, new_view_dir

NOISE_BYTES = 256 * 1024
# Writes NOISE_BYTES to stderr (4 KB at a time, more than the pipe holds), then a record.
WRITER = (
    "import os, sys\n"
    f"for _ in range({NOISE_BYTES} // 4096): os.write(2, b'e' * 4095 + b'\\n')\n"
    "os.write(int(sys.argv[1]), b'{\"e\": \"start\", \"id\": \"t\"}\\n')\n"
    "os.write(1, b'after\\n')\n"
)


def test_output_written_before_a_record_is_before_its_mark_even_behind_a_slow_sink(
    sandbox: BwrapSandbox, settings: Settings
) -> None:
    def slow_live_view(name: str, chunk: bytes) -> None:
        time.sleep(0.005)  # the live view's own writes, on a busy machine

    view = new_view_dir(settings, prefix="marks-")
    try:
        (view / "writer.py").write_text(WRITER)
        counted = OutputCount(slow_live_view)
        with Channel(counted) as channel:
            obs = sandbox.run(f"python3 writer.py {channel.fd}", view=view, cwd="",
                              writable=[], pass_fds=[channel.fd], on_output=counted)
            stream = channel.close()
    finally:
        shutil.rmtree(view)
    assert obs.exit_code == 0, obs.stderr[-500:]
    [record] = stream.records
    [mark] = stream.marks
    assert record["e"] == "start"
    assert mark.stderr == NOISE_BYTES
    assert mark.stdout in (0, len(b"after\n"))
    assert counted.positions() == {"stdout": len(b"after\n"), "stderr": NOISE_BYTES}
