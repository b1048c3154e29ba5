"""olympia fmt rewrites safely: a new file of a random name, never a link followed, the mode
kept, read-only files and links leading outside the spec tree refused, a killed run leaving
the whole old or the whole new spec (real files, real processes)."""

from __future__ import annotations

import os
import random
import resource
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from olympia.cli import main
from olympia.spec.loader import spec_files
from olympia.spec.rewrite import replace_file

MESSY = "namespace: s   \r\n\r\n\r\ncomment: kept  \r\n"
TIDY = "namespace: s\n\ncomment: kept\n"
# names a writer could have predicted: the old fixed temporary name and common ones
PREDICTABLE = (".s.yaml.fmt-tmp", ".s.yaml.tmp", "s.yaml.tmp", ".s.yaml.swp", "s.yaml~")
# the command line in a process of its own (argv[1:] are the arguments)
COMMAND = [sys.executable, "-c", "from olympia.cli import main; main()"]


def run(*args: str) -> Result:
    result = CliRunner().invoke(main, list(args), env={"NO_COLOR": "1"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode())
    path.chmod(mode)
    return path


def snapshot(folder: Path) -> dict[str, tuple[str, bytes | str, int]]:
    """Every entry under ``folder``: its kind, content (a link's target) and mode."""
    entries: dict[str, tuple[str, bytes | str, int]] = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        if path.is_symlink():
            entries[str(path)] = ("link", os.readlink(path), 0)
        elif path.is_file():
            entries[str(path)] = ("file", path.read_bytes(), stat.S_IMODE(info.st_mode))
        else:
            entries[str(path)] = ("folder", "", stat.S_IMODE(info.st_mode))
    return entries


def test_fmt_never_follows_a_link_planted_at_a_temporary_name(tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    file = write(spec / "s.yaml", MESSY)
    victim = write(tmp_path / "outside" / "victim.yaml", "precious: true\n")
    for name in PREDICTABLE:
        (spec / name).symlink_to(victim)
    before = snapshot(tmp_path)
    check = run("fmt", "--check", str(spec))
    assert (check.exit_code, check.output) == (3, f"would reformat {file}\n")
    assert snapshot(tmp_path) == before  # --check writes nothing
    out = run("fmt", str(spec))
    assert (out.exit_code, out.output) == (0, f"reformatted {file}\n")
    after = snapshot(tmp_path)
    assert after.pop(str(file)) == ("file", TIDY.encode(), 0o644)
    assert before.pop(str(file)) == ("file", MESSY.encode(), 0o644)
    assert after == before  # every link still a link to the victim, left as it was
    assert victim.read_text() == "precious: true\n"


def test_fmt_formats_a_link_inside_the_tree_through_it(tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    hidden = write(spec / ".shared" / "s.yaml", MESSY, 0o600)  # not a spec by itself
    link = spec / "s.yaml"
    link.symlink_to(Path(".shared") / "s.yaml")
    real = write(spec / "t.yaml", MESSY.replace("s", "t"))
    twin = spec / "u.yaml"
    twin.symlink_to("t.yaml")  # the same file twice: written once
    out = run("fmt", str(spec))
    assert (out.exit_code, out.output) == (0, f"reformatted {link}\nreformatted {real}\n")
    assert os.readlink(link) == str(Path(".shared") / "s.yaml")
    assert os.readlink(twin) == "t.yaml"
    assert hidden.read_text() == TIDY and stat.S_IMODE(hidden.stat().st_mode) == 0o600
    assert real.read_text() == TIDY.replace("s", "t")
    assert sorted(os.listdir(spec / ".shared")) == ["s.yaml"]  # no temporary file left
    assert run("fmt", str(link)).output == "All spec files are formatted.\n"


def test_fmt_refuses_a_link_leading_outside_the_spec_tree(tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    outside = write(tmp_path / "elsewhere" / "s.yaml", MESSY)
    link = spec / "s.yaml"
    write(spec / "t.yaml", MESSY.replace("s", "t"))
    link.symlink_to(outside)
    (spec / "linked").symlink_to(outside.parent, target_is_directory=True)  # never walked
    before = snapshot(tmp_path)
    for args in (["fmt", str(spec)], ["fmt", "--check", str(spec)], ["fmt", str(link)]):
        out = run(*args)
        assert out.exit_code == 1
        assert out.output == (f"Error: {link}: links outside the spec tree {spec.resolve()} "
                              f"(to {outside.resolve()}); not formatted\n")
        assert snapshot(tmp_path) == before  # nothing written, not even the other file
    link.unlink()
    out = run("fmt", str(spec))
    assert (out.exit_code, out.output) == (0, f"reformatted {spec / 't.yaml'}\n")
    assert outside.read_bytes() == MESSY.encode()  # the folder link was not followed


def test_fmt_keeps_modes_and_refuses_read_only_files(tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    private = write(spec / "a.yaml", MESSY.replace("s", "a"), 0o600)
    shared = write(spec / "b.yaml", MESSY.replace("s", "b"), 0o640)
    locked = write(spec / "c.yaml", MESSY.replace("s", "c"), 0o444)
    before = snapshot(tmp_path)
    out = run("fmt", str(spec))
    assert (out.exit_code, out.output) == (
        1, f"Error: {locked}: is read-only; not formatted (make it writable first)\n")
    assert snapshot(tmp_path) == before  # nothing written
    assert run("fmt", "--check", str(spec)).output.count("would reformat") == 3
    locked.chmod(0o644)
    write(locked, TIDY.replace("s", "c"), 0o444)  # a read-only file already formatted: fine
    out = run("fmt", str(spec))
    assert (out.exit_code, out.output) == (0, f"reformatted {private}\nreformatted {shared}\n")
    assert [stat.S_IMODE(f.stat().st_mode) for f in (private, shared, locked)] == [
        0o600, 0o640, 0o444]
    assert private.read_text() == TIDY.replace("s", "a")


def test_a_failed_write_leaves_the_spec_and_no_temporary_file(tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    file = write(spec / "s.yaml", "namespace: s   \n" + "# note  \n" * 1000)

    def small_files() -> None:  # writing past 4 KiB fails (EFBIG) in the child process
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    before = snapshot(tmp_path)
    out = subprocess.run([*COMMAND, "fmt", str(spec)], capture_output=True, text=True,
                         preexec_fn=small_files, timeout=120, check=False)
    assert (out.returncode, out.stderr) == (
        1, f"Error: {file}: cannot be written: File too large\n")
    assert snapshot(tmp_path) == before


def test_replace_file_never_writes_through_a_link(tmp_path: Path) -> None:
    target = write(tmp_path / "target.yaml", "a: 1\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    with pytest.raises(OSError, match="not a regular file"):
        replace_file(link, b"b: 2\n")
    assert (target.read_text(), os.readlink(link)) == ("a: 1\n", str(target))
    assert sorted(os.listdir(tmp_path)) == ["link.yaml", "target.yaml"]


KILLS = 8
KILL_BUDGET = 40.0  # seconds for further kills: a run takes 3 s, several on a busy machine


def test_a_killed_fmt_leaves_the_whole_old_or_the_whole_new_spec(tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    file = spec / "big.yaml"
    # ~4 MiB, to rewrite: CRLF line ends and trailing spaces
    original = ("namespace: big   \r\n" + f"# {'y' * 1000}   \r\n" * 4150).encode()
    write(file, original.decode())
    began = time.monotonic()
    assert subprocess.run([*COMMAND, "fmt", str(spec)], timeout=300).returncode == 0
    took = time.monotonic() - began
    new = file.read_bytes()
    assert new != original and b"\r" not in new and len(original) > 4_000_000
    rng = random.Random(32)
    kills = in_write = 0
    stale: set[str] = set()
    deadline = time.monotonic() + KILL_BUDGET
    while kills < KILLS and time.monotonic() < deadline:
        file.write_bytes(original)
        process = subprocess.Popen([*COMMAND, "fmt", str(spec)], stdout=subprocess.DEVNULL)
        if kills % 2:  # at any point of the run
            time.sleep(rng.uniform(0, took))
        else:  # once it has created its temporary file, while it writes, fsyncs, renames
            while process.poll() is None and not set(os.listdir(spec)) - stale - {file.name}:
                pass
            time.sleep(rng.uniform(0, 0.005) if kills else 0)  # the first: at once
        process.send_signal(signal.SIGKILL)
        process.wait()
        kills += 1
        content = file.read_bytes()
        assert content in (original, new), f"torn after a kill: {len(content)} bytes"
        left = set(os.listdir(spec)) - stale - {file.name}
        if left:  # killed between creating its temporary file and renaming it
            in_write += 1
            assert content == original
            assert all(n.startswith(".big.yaml.") and n.endswith(".tmp") for n in left)
        stale |= left
    # the first kill always waits for the temporary file, so a busy machine still gets one
    assert kills >= 2 and in_write >= 1, (kills, in_write)
    # stale temporary files are no specs, and the next fmt neither reads nor removes them
    assert spec_files(spec) == [file]
    leftovers = {name: (spec / name).read_bytes() for name in stale}
    file.write_bytes(original)
    assert subprocess.run([*COMMAND, "fmt", str(spec)], timeout=300).returncode == 0
    assert file.read_bytes() == new
    assert {name: (spec / name).read_bytes() for name in stale} == leftovers
    assert set(os.listdir(spec)) == stale | {file.name}
