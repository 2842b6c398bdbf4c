#!/usr/bin/env python3
"""Every C++ block in README.md and docs/*.md builds, so no page can show code that does not.

    cmake/doc_code_blocks.py generate <repository root> <out.cpp>   # one program of every block
    cmake/doc_code_blocks.py excerpts <repository root>             # excerpts match their files

A block's fence says what it is:

  ```cpp                  compiled. With `int main(` it is a program: built and run (it must
                          return 0; it runs in a fresh temporary directory). Without, it is a
                          fragment: compiled as the body of a function in which a small training
                          scene exists -- model, x, y, loss, opt, scaler, loader, train, schedule,
                          step (SCENE below) -- and not run.
  ```cpp no-run           a program that is built but not run (it needs a dataset or a GPU).
  ```cpp excerpt <path>   lines of <path>, in order, as the repository has them (leading and
                          trailing spaces aside); a line that is only "..." (or "// ...") stands
                          for lines left out. Checked by `excerpts`, not compiled.

`generate` writes one C++ file: each program in its own namespace (its #include lines moved to
the top, `#include <halfgrad/...>` read from the source tree), each fragment a function, and a
main() that runs the programs in order and names the page and line of any that fails. #line
directives make a compile error point at the Markdown line.
"""
import re
import sys
from pathlib import Path

FENCE = re.compile(r"^```(cpp[^\n]*)\n(.*?)^```[ \t]*$", re.S | re.M)

SCENE = """\
  // The scene a fragment sees (cmake/doc_code_blocks.py).
  [[maybe_unused]] hg::nn::Sequential model{hg::nn::Flatten(), hg::nn::Linear(784, 10)};
  [[maybe_unused]] hg::Tensor x = hg::rand({8, 1, 28, 28});
  [[maybe_unused]] hg::Tensor y = hg::randint(0, 10, {8}, {.dtype = hg::i64});
  [[maybe_unused]] hg::Tensor loss;
  [[maybe_unused]] hg::optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  [[maybe_unused]] hg::amp::GradScaler scaler;
  [[maybe_unused]] hg::data::TensorDataset train(x, y);
  [[maybe_unused]] hg::data::DataLoader loader(train, {.batch_size = 4});
  [[maybe_unused]] hg::optim::StepLR schedule(opt, 10);
  [[maybe_unused]] int64_t step = 0;
"""


def pages(root):
    found = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    return [p for p in found if p.exists()]


def blocks(root):
    """Yields (page, first line of the block's code, fence info, code)."""
    for page in pages(root):
        text = page.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start(2)) + 1
            yield page.relative_to(root), line, m.group(1).split(), m.group(2)


def generate(root, out):
    includes = ["#include \"halfgrad.h\"", "#include <cstdlib>", "#include <filesystem>", "#include <iostream>",
                "#include <string>"]
    bodies, programs, fragments = [], [], 0
    for page, line, info, code in blocks(root):
        kind = info[1] if len(info) > 1 else ""
        if kind == "excerpt":
            continue
        if kind not in ("", "no-run"):
            sys.exit(f"{page}:{line - 1}: unknown fence ```{' '.join(info)} (cpp, cpp no-run, cpp excerpt <path>)")
        own_includes = re.findall(r"^\s*#\s*include\s*[<\"][^>\"]+[>\"]", code, re.M)
        for inc in own_includes:
            inc = re.sub(r"#\s*include\s*<halfgrad/([^>]+)>", r'#include "\1"', inc.strip())
            if inc not in includes:
                includes.append(inc)
        # Blank the include lines rather than delete them, so #line numbers stay right.
        code = re.sub(r"^\s*#\s*include[^\n]*$", "", code, flags=re.M)
        index = len(bodies)
        where = f'#line {line} "{page}"'
        if re.search(r"\bint\s+main\s*\(", code):
            takes_args = re.search(r"\bint\s+main\s*\(\s*int", code) is not None
            bodies.append(f"namespace doc_block_{index} {{\n{where}\n{code}\n}}  // namespace doc_block_{index}\n")
            if kind != "no-run":
                programs.append((index, page, line, takes_args))
        else:
            fragments += 1
            bodies.append(f"[[maybe_unused]] static void doc_fragment_{index}() {{\n{SCENE}  {{\n{where}\n{code}\n  }}\n}}\n")
    runs = []
    for index, page, line, takes_args in programs:
        call = (f'char name[] = "doc"; char* argv[] = {{name, nullptr}}; return doc_block_{index}::main(1, argv);'
                if takes_args else f"return doc_block_{index}::main();")
        runs.append(f'  failures += run("{page}:{line}", [] {{ {call} }});')
    main = f"""
namespace {{
// Runs one program in a fresh temporary directory; 1 if it fails.
template <class Program>
int run(const char* where, Program program) {{
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
      ("halfgrad_doc_" + std::to_string(::getpid()) + "_" + std::to_string(std::hash<std::string>{{}}(where)));
  std::filesystem::create_directories(dir);
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  int status = 1;
  try {{
    status = program();
  }} catch (const std::exception& e) {{
    std::cerr << where << ": threw: " << e.what() << "\\n";
  }}
  std::filesystem::current_path(before);
  std::filesystem::remove_all(dir);
  std::cout << (status == 0 ? "ran   " : "FAILED ") << where << "\\n";
  return status == 0 ? 0 : 1;
}}
}}  // namespace

int main() {{
  int failures = 0;
{chr(10).join(runs)}
  std::cout << {len(programs)} << " programs run, " << {fragments} << " fragments compiled, " << failures << " failed\\n";
  return failures == 0 ? 0 : 1;
}}
"""
    text = "// Generated by cmake/doc_code_blocks.py from README.md and docs/*.md: do not edit.\n"
    text += "\n".join(includes) + "\n#include <unistd.h>\n\n" + "\n".join(bodies) + main
    out = Path(out)
    if not out.exists() or out.read_text() != text:  # unchanged: no rebuild
        out.write_text(text)
    return 0


def excerpts(root):
    failures, checked = 0, 0
    for page, line, info, code in blocks(root):
        if len(info) < 2 or info[1] != "excerpt":
            continue
        checked += 1
        if len(info) != 3:
            print(f"{page}:{line - 1}: ```cpp excerpt needs the path of the file it quotes")
            failures += 1
            continue
        path = root / info[2]
        if not path.is_file():
            print(f"{page}:{line - 1}: {info[2]} does not exist")
            failures += 1
            continue
        source = [l.strip() for l in path.read_text().splitlines()]
        at, contiguous = 0, False  # the first line may be anywhere in the file
        for offset, quoted in enumerate(code.splitlines()):
            q = quoted.strip()
            if q in ("...", "// ..."):
                contiguous = False
                continue
            if not q:
                continue
            # The next source line (skipping blank ones), or after an elision any later line.
            found = None
            for i in range(at, len(source)):
                if source[i] == q:
                    found = i
                    break
                if contiguous and source[i]:
                    break
            if found is None:
                print(f"{page}:{line + offset}: not in {info[2]}{' (at this place)' if contiguous else ''}: {q}")
                failures += 1
                break
            at, contiguous = found + 1, True
    print(f"doc_code_blocks: {checked} excerpts, {failures} that do not match their files")
    return 1 if failures else 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "generate":
        return generate(Path(sys.argv[2]).resolve(), sys.argv[3])
    if len(sys.argv) == 3 and sys.argv[1] == "excerpts":
        return excerpts(Path(sys.argv[2]).resolve())
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
