"""Hand probe (docs/omnigent.md, issue 23): omnigent 0.19.1's ``TerminalInstance.send`` of long texts,
which it types in 1024-character chunks with ``send-keys -l`` and no ``--``.

Run with the Python of omnigent's own venv (3.12; docs/omnigent.md), with ``HOME`` and ``TMUX_TMPDIR``
pointing at private directories. It starts its own tmux server on a socket in a temporary directory,
types each text as a comment without submitting it, reads the line back, erases it, and closes the
server and removes the directory at the end.
"""

import asyncio
import shutil
import tempfile
from pathlib import Path

from omnigent.inner.terminal import TerminalInstance

CASES = {
    "5000 letters": "x" * 5000,
    "31602 letters": "y" * 31602,
    "'-' at 1024 (a chunk starts with -)": "a" * 1024 + "-b" + "c" * 500,
    "'-' at 1000 (inside a chunk)": "a" * 1000 + "-b" + "c" * 500,
    "';' at 1023 (a chunk ends with ;)": "a" * 1023 + ";" + "c" * 500,
    "';' at 1000 (inside a chunk)": "a" * 1000 + ";" + "c" * 500,
}


async def main() -> None:
    directory = Path(tempfile.mkdtemp(prefix="omniprobe-"))
    terminal = TerminalInstance(name="sh", session_key="s1", socket_path=directory / "tmux.sock",
                                private_dir=directory, command="bash", args=["--norc", "--noprofile"])
    await terminal.launch(cwd=directory)
    try:
        for label, text in CASES.items():
            result = await terminal.send("#" + text[1:], keys="")  # a comment, not submitted
            await asyncio.sleep(0.5)  # a hand probe: its reader looks at the numbers, nothing asserts
            screen = (await terminal.read(scrollback=200)).get("screen", "")
            typed = "".join(screen.split("\n")).rstrip()
            await terminal.send(None, keys="C-u")
            await asyncio.sleep(0.3)
            print(f"{label:40} -> {str(result)[:70]} ; ';' in text/typed: {(text.count(';'), typed.count(';'))}")
    finally:
        await terminal.close()
        shutil.rmtree(directory, ignore_errors=True)


asyncio.run(main())
