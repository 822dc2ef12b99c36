"""Code and docs describe the product: a module's docstring says what the module holds and
why in at most :data:`MAX_DOCSTRING_LINES` lines (depth goes to docs/), and no file speaks
of how the work on it was organised (an issue's or a stop's number, a helper's name)."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mhabench"
MAX_DOCSTRING_LINES = 30
# Words about how the work was organised; case-insensitive, as git grep -iE reads it.
WORK_TALK = r"stop [0-9]+|issue [0-9]+|helper-[0-9]"
WORK_TALK_FILES = ("*.py", "*.md")


def docstring_lines(path: Path) -> int:
    """Lines the module docstring of ``path`` spans in the file, its quotes included (0:
    none)."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    first = body[0] if body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return 0
    return first.end_lineno - first.lineno + 1


def work_talk(root: Path) -> list[str]:
    """``file:line:text`` of every line matching :data:`WORK_TALK` in the ``*.py`` and
    ``*.md`` files of the git checkout at ``root``, tracked or not yet (nothing is
    excluded but .git and what .gitignore ignores)."""
    done = subprocess.run(["git", "grep", "--untracked", "-n", "-i", "-E", WORK_TALK, "--",
                           *WORK_TALK_FILES], cwd=root, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: no line matched
        raise RuntimeError(f"git grep failed in {root}: {done.stderr.strip()}")
    return done.stdout.splitlines()


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_docstring_fits_in_30_lines(path: Path) -> None:
    lines = docstring_lines(path)
    assert lines <= MAX_DOCSTRING_LINES, (
        f"{path.relative_to(ROOT)}: module docstring of {lines} lines (at most "
        f"{MAX_DOCSTRING_LINES}; move the depth to docs/)")


def test_docstring_lines_counts_the_span_a_reader_sees(tmp_path: Path) -> None:
    long = tmp_path / "long.py"
    long.write_text('"""One.\n' + "more\n" * 29 + '"""\n\nX = 1\n', encoding="utf-8")
    one = tmp_path / "one.py"
    one.write_text('"""One line."""\n', encoding="utf-8")
    bare = tmp_path / "bare.py"
    bare.write_text("X = 1  # no docstring\n", encoding="utf-8")
    assert (docstring_lines(long), docstring_lines(one), docstring_lines(bare)) == (31, 1, 0)


def test_no_file_speaks_of_how_the_work_was_organised() -> None:
    found = work_talk(ROOT)
    assert not found, "\n".join(found)


def test_work_talk_finds_planted_lines_in_new_files(tmp_path: Path) -> None:
    # Spelled in pieces, so that this file holds no such line itself.
    stop, issue, helper = "Stop " + "12", "issue " + "7", "helper-" + "3"
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "notes.md").write_text(f"Fixed in {stop}.\nStop at 12 rows.\n",
                                       encoding="utf-8")
    (tmp_path / "code.py").write_text(f"x = 1  # see {issue}\ny = '{helper}'\n",
                                      encoding="utf-8")
    (tmp_path / "data.txt").write_text(f"{issue}\n", encoding="utf-8")  # neither .py nor .md
    assert sorted(work_talk(tmp_path)) == [f"code.py:1:x = 1  # see {issue}",
                                           f"code.py:2:y = '{helper}'",
                                           f"notes.md:1:Fixed in {stop}."]
