#!/usr/bin/env python3
"""Checks that every `#include "..."` of the library points down (or sideways) a layer.

    cmake/check_layers.py <repository root> <layers file>

The layers file (cmake/layers.txt) lists the layers lowest first and the known upward includes
still allowed. Exit status 0 when every include of every library file (.h .cpp .cu .cuh outside
tests/, bench/, examples/) points to its own layer or a lower one, 1 otherwise with one line per
fault. Angle-bracket includes (<vector>, <Eigen/Core>) are other libraries: not checked.

A second check covers what includes cannot see: core/tensor.h declares Tensor's methods (the
LibTorch-style API), but autograd and ops define some of them (`Tensor::contiguous` records a
node, `Tensor::fill_` checks grad mode). A call of such a method from a file below the layer that
defines it is a fault too; below ops the library uses core/copy.h's dense(), dense_view(),
transposed_view() and core/fill.h instead.
"""
import re
import sys
from pathlib import Path

SOURCE_SUFFIXES = {".h", ".cpp", ".cu", ".cuh"}
NOT_LIBRARY = {"tests", "bench", "examples", "build", "docs", "scripts", "cmake"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
METHOD_DEFINITION = re.compile(r"^[\w:<>&* ]*\bTensor::(\w+)\s*\((\)?)", re.MULTILINE)
FORWARDING_METHOD = re.compile(r"\b(\w+)\([^)]*\) const \{ return (\w+)\(")  # core/tensor.h's inline t()
METHOD_CALL = re.compile(r"\.(\w+)\s*\((\)?)")
COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', re.DOTALL)


def read_layers(path):
    """Returns ({folder: (rank, layer name)}, {(file, included file)} allowed upward)."""
    folders, allowed = {}, set()
    rank = 0
    for number, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("layer "):
            name, _, members = line[len("layer "):].partition(":")
            for folder in members.split():
                folders[folder] = (rank, name.strip())
            rank += 1
        elif line.startswith("allow "):
            source, arrow, target = line[len("allow "):].partition("->")
            if not arrow:
                sys.exit(f"{path}:{number}: expected 'allow <file> -> <included file>'")
            allowed.add((source.strip(), target.strip()))
        else:
            sys.exit(f"{path}:{number}: expected 'layer <name>: <folders>' or 'allow <file> -> <file>'")
    return folders, allowed


def layer_of(relative_path, folders):
    folder = str(Path(relative_path).parent)
    return folders.get(folder)


def library_files(root, folders):
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if path.suffix not in SOURCE_SUFFIXES or relative.parts[0] in NOT_LIBRARY or relative.parts[0].startswith("build"):
            continue
        yield path, relative, layer_of(relative, folders)


def upper_tensor_methods(root, folders):
    """{method name: (rank, layer name, defining file, takes no arguments)} for Tensor methods
    defined above core. A method without arguments only matches calls without arguments
    (`x.grad()` is Tensor::grad, `f.grad(a, b)` a formula's)."""
    methods = {}
    for path, relative, own in library_files(root, folders):
        if own is None or own[0] == 0 or path.suffix != ".cpp":
            continue
        for name, no_arguments in METHOD_DEFINITION.findall(path.read_text(errors="replace")):
            methods[name] = (own[0], own[1], str(relative), bool(no_arguments))
    tensor_h = root / "core" / "tensor.h"
    if tensor_h.exists():
        for name, target in FORWARDING_METHOD.findall(tensor_h.read_text(errors="replace")):
            if target in methods and name not in methods:
                methods[name] = methods[target]
    return methods


def method_call_faults(root, folders):
    methods = upper_tensor_methods(root, folders)
    faults = []
    for path, relative, own in library_files(root, folders):
        if own is None:
            continue
        code = COMMENT_OR_STRING.sub(" ", path.read_text(errors="replace"))
        for name, no_arguments in sorted(set(METHOD_CALL.findall(code))):
            if name not in methods:
                continue
            rank, layer, where, takes_none = methods[name]
            if rank > own[0] and (no_arguments or not takes_none):
                faults.append(f"{relative} ({own[1]}) calls Tensor::{name}, defined in {where} ({layer}): a call "
                              "pointing up a layer")
    return faults


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    root, layers_file = Path(sys.argv[1]), sys.argv[2]
    folders, allowed = read_layers(layers_file)
    faults, used_allowances, checked = [], set(), 0
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if path.suffix not in SOURCE_SUFFIXES or relative.parts[0] in NOT_LIBRARY or relative.parts[0].startswith("build"):
            continue
        own = layer_of(relative, folders)
        if own is None:
            faults.append(f"{relative}: its folder is in no layer of {layers_file}")
            continue
        checked += 1
        for included in INCLUDE.findall(path.read_text(errors="replace")):
            target = layer_of(included, folders)
            if target is None:
                continue  # a header next to the file, or a generated one: same layer
            if target[0] <= own[0]:
                continue
            if (str(relative), included) in allowed:
                used_allowances.add((str(relative), included))
                continue
            faults.append(f"{relative} ({own[1]}) includes {included} ({target[1]}): an include pointing up a layer")
    faults += method_call_faults(root, folders)
    for source, target in sorted(allowed - used_allowances):
        faults.append(f"allowed upward include {source} -> {target} no longer exists: delete its line from {layers_file}")
    for fault in faults:
        print(fault)
    print(f"check_layers: {checked} files, {len(faults)} fault(s), {len(used_allowances)} known upward include(s) left")
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
