#!/usr/bin/env python3
"""Checks the signposts a reader follows: paths named in comments and docs, and documents cited.

    cmake/check_signposts.py <repository root>

Exit status 0 when
  * every repository path named in a comment (or anywhere) of a source, script or CMake file, and
    in docs/*.md and README.md, exists -- "kernels/math/norm.h", "docs/amp.md", "tests/fuzz/"
    (a path with a wildcard or a <placeholder> is a pattern, not checked);
  * no file cites a document that is not in the repository (the project's design notes live in
    docs/: testing.md, style.md; "TESTING.md" or "STYLE.md" alone names a file outside it);
  * no op names itself with a string (ops record under their op-table row: record(amp::Op::Mul,
    ...), and a SavedTensor needs no name);
1 otherwise, with one line per fault: "file:line: what".
"""
import os
import re
import sys
from pathlib import Path

TOP_FOLDERS = ["core", "autograd", "amp", "ops", "kernels", "nn", "optim", "data", "distributed", "tests",
               "examples", "bench", "scripts", "docs", "cmake", "amp_tools"]
# A path: a top folder, then segments; it ends in a file with a known suffix, or in "/".
PATH = re.compile(r"(?<![\w./$}-])((?:\.\./)?(?:" + "|".join(TOP_FOLDERS) + r")/[\w./-]*)")
# A file named without its folder ("see norm.h"): some file of that name must exist.
BARE_NAME = re.compile(r"(?<![\w/.<\"$}-])([A-Za-z_][\w-]*\.(?:h|cpp|cu|cuh))(?![\w-]|\.\w)")
EXTERNAL_HEADERS = {"mpi.h", "nccl.h", "cudnn.h", "cudnn_version.h", "cuda_runtime.h", "cublasLt.h", "zlib.h",
                    "cuda_fp16.h", "cuda_bf16.h", "immintrin.h", "arm_neon.h", "omp.h"}
ROOT_FILES = re.compile(r"(?<![\w./-])((?:README|CMakeLists)\.(?:md|txt)|halfgrad\.h)\b")
# Documents that live outside the repository (the founders' notes): cited only through docs/.
OUTSIDE = re.compile(r"(?<![\w/.-])(TESTING|STYLE|DESIGN|API|AMP|ECOSYSTEM)\.md\b")
OP_NAME_STRING = re.compile(r'\brecord\(\s*"|\bSavedTensor\([^()]*(?:\([^()]*\)[^()]*)*,\s*"')
SOURCES = {".h", ".cpp", ".cu", ".cuh", ".py", ".sh", ".txt", ".cmake", ".in"}
SKIP_DIRS = {"build", ".git", "golden", "fuzz_corpus", "layers_fixture", "signposts_fixture", "fixtures"}


def tree(root):
    """Every file of the repository, build directories and SKIP_DIRS left out -- pruned before
    descending, so tests writing into a build directory while this runs cannot disturb it."""
    for directory, subdirs, filenames in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("build") and d not in SKIP_DIRS)
        for name in sorted(filenames):
            yield Path(directory) / name


def files(root):
    for path in tree(root):
        rel = path.relative_to(root)
        if path.suffix in SOURCES or (path.suffix == ".md" and (rel.parts[0] == "docs" or rel.name == "README.md")):
            yield path, rel


def exists(root, rel_file, text):
    if "*" in text or "<" in text or "..." in text:
        return True  # a pattern, not a path
    candidates = [root / text]
    if text.startswith("../"):  # relative to the file (a markdown link from docs/)
        candidates.append((root / rel_file.parent / text).resolve())
    candidates.append(root / rel_file.parent / text)  # a doc's figure named from its own folder (img/...)
    candidates.append(root / (text + ".cpp"))  # a program named by its source: bench/ops_bench
    for c in candidates:
        if c.exists():
            return True
    return False


def main():
    root = Path(sys.argv[1]).resolve()
    faults = []
    names = {p.name for p in tree(root)}
    for path, rel in files(root):
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if "REGULAR_EXPRESSION" in line or line.lstrip().startswith("#include"):
                continue  # a test's expected message (names of a fixture); an include the compiler checks
            comment = line
            if path.suffix in {".h", ".cpp", ".cu", ".cuh"}:
                comment = line.split("//", 1)[1] if "//" in line else ""
            for match in BARE_NAME.finditer(comment):
                if match.group(1) not in names and match.group(1) not in EXTERNAL_HEADERS:
                    faults.append(f"{rel}:{number}: names {match.group(1)}; no file of that name exists")
            for match in PATH.finditer(line):
                name = match.group(1).rstrip(".")  # (a sentence's full stop)
                if match.end() < len(line) and line[match.end()] in "<*{":
                    continue  # ops/<family>.cpp, tests/test_*.cpp: a pattern
                if not exists(root, rel, name):
                    faults.append(f"{rel}:{number}: names {name}, which does not exist")
            for match in OUTSIDE.finditer(line):
                if rel.name == "check_signposts.py":
                    continue
                faults.append(f"{rel}:{number}: cites {match.group(0)}, which is not in the repository "
                              f"(docs/{match.group(1).lower()}.md is, where one exists)")
            if rel.parts[0] == "ops" and OP_NAME_STRING.search(line):
                faults.append(f"{rel}:{number}: names its op with a string; record(amp::Op::..., ...) and "
                              f"SavedTensor(t) take the op-table row")
    for fault in faults:
        print(fault)
    print(f"check_signposts: {len(faults)} fault(s)")
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
