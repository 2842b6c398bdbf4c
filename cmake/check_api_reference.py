#!/usr/bin/env python3
"""docs/api.md lists every public name: the reference cannot fall behind the headers.

    cmake/check_api_reference.py <repository root>          # exit 1 naming what is missing
    cmake/check_api_reference.py <repository root> --list   # every public name, one per line

The public headers are the ones halfgrad.h includes and, transitively, the ones they include
(outside kernels/ and core/cuda/, which halfgrad.h names only for core/cuda/gemm_settings.h). A
public name is what such a
header declares at namespace scope in hg or a namespace inside it -- a class, struct, enum or
union with a body, a free function, a type alias, a namespace-scope constant -- except in
detail namespaces (nothing in a class or function body counts: members are documented with
their class).

docs/api.md lists hg::nn::Linear when "Linear" appears as a word in its code (`...` spans or
fenced blocks) inside a section for hg::nn -- a heading naming `hg::nn` in backquotes, up to the
next heading that names a namespace -- or anywhere qualified, `hg::nn::Linear`. So a name two
namespaces share (hg::load, hg::nn::load) has to be listed in both.
"""
import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "decltype", "static_assert", "alignof", "requires",
            "noexcept", "alignas"}


def public_headers(root):
    """halfgrad.h's includes and, transitively, theirs -- except kernels/ and core/cuda/, which a
    public header may include for its own inline code without making them public."""
    headers, pending = [], list(INCLUDE.findall((root / "halfgrad.h").read_text()))
    direct = set(pending)
    while pending:
        header = pending.pop(0)
        if header in headers or not (root / header).exists():
            continue
        if header not in direct and header.startswith(("kernels/", "core/cuda/")):
            continue
        headers.append(header)
        pending += INCLUDE.findall((root / header).read_text())
    return headers


def without_comments_and_directives(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)  # strings may hold braces or slashes
    text = re.sub(r"'(?:\\.|[^'\\\n])'", "''", text)
    text = re.sub(r"//[^\n]*", "", text)
    # Preprocessor lines, with their continuations.
    return re.sub(r"^\s*#(?:[^\n]*\\\n)*[^\n]*", "", text, flags=re.M)


def strip_balanced(text, opener, closer):
    """Removes every balanced opener...closer group (template argument lists, requires(...))."""
    out, depth = [], 0
    for ch in text:
        if ch == opener:
            depth += 1
        elif ch == closer and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def declared_name(statement, ends_with_brace):
    """The name a namespace-scope statement declares, and its kind; (None, None) if none."""
    s = " ".join(statement.split())
    s = re.sub(r"^template\s*<", "<", s)
    if s.startswith("<"):  # drop the template header
        depth = 0
        for i, ch in enumerate(s):
            depth += ch == "<"
            depth -= ch == ">"
            if depth == 0:
                s = s[i + 1:].strip()
                break
    s = re.sub(r"\brequires\s*\([^)]*\)", "", s).strip()
    s = re.sub(r"\bdecltype\s*\((?:[^()]|\([^()]*\))*\)", "decltype_", s)  # its parentheses are not the call's
    if not s or s.startswith(("friend ", "extern \"\"", "static_assert", "using namespace")):
        return None, None
    m = re.match(r"using\s+([A-Za-z_]\w*)\s*=", s)
    if m:
        return m.group(1), "alias"
    m = re.match(r"(?:\[\[[^\]]*\]\]\s*)?(?:class|struct|union|enum(?:\s+class|\s+struct)?)\s+(?:\[\[[^\]]*\]\]\s*)?"
                 r"([A-Za-z_]\w*)\s*(?:final\s*)?(?::[^{]*)?$", s)
    if m:
        return (m.group(1), "type") if ends_with_brace else (None, None)  # a forward declaration is not one
    if "operator" in s.split("(")[0]:
        return None, None
    head = strip_balanced(s, "<", ">")
    paren, equals = head.find("("), head.find("=")
    if paren >= 0 and (equals < 0 or paren < equals):
        m = re.search(r"(::\s*)?([A-Za-z_]\w*)\s*$", head[:paren])
        # A return type, then the name -- not Class::member, a member defined outside its class.
        if m and not m.group(1) and m.group(2) not in KEYWORDS and " " in head[:paren].strip():
            return m.group(2), "function"
        return None, None
    m = re.match(r"(?:inline\s+)?(?:constexpr|const)\s+[\w:<>,\s\*&]+?\s([A-Za-z_]\w*)\s*(?:=|\{|;|$)", head)
    if m:
        return m.group(1), "constant"
    return None, None


def declarations(text):
    """Yields (namespace, name, kind) for each declaration at namespace scope."""
    text = without_comments_and_directives(text)
    scopes = []  # a namespace name ("" for an anonymous one), or None for any other brace
    statement, parens = [], 0
    for ch in text:
        if ch in "([":
            parens += 1
        elif ch in ")]":
            parens = max(0, parens - 1)
        if parens or ch not in ";{}":
            statement.append(ch)
            continue
        body = "".join(statement).strip()
        statement = []
        at_namespace_scope = all(s is not None for s in scopes)
        namespace = "::".join(s for s in scopes if s)
        parts = namespace.split("::")
        hidden = "" in scopes or any(p == "detail" or p.endswith("_detail") for p in parts)
        if ch == "{":
            ns = re.match(r"^(?:inline\s+)?namespace\s*([\w:]*)$", body)
            if ns and at_namespace_scope:
                scopes.append(ns.group(1))  # "hg::nn" is one scope: one brace closes it
                continue
            if at_namespace_scope and not hidden and namespace.startswith("hg"):
                name, kind = declared_name(body, ends_with_brace=True)
                if name:
                    yield namespace, name, kind
            scopes.append(None)
        elif ch == "}":
            if scopes:
                scopes.pop()
        else:  # ';'
            if at_namespace_scope and not hidden and namespace.startswith("hg") and body:
                name, kind = declared_name(body, ends_with_brace=False)
                if name:
                    yield namespace, name, kind


def public_names(root):
    names = {}
    for header in public_headers(root):
        for namespace, name, kind in declarations((root / header).read_text()):
            names.setdefault((namespace, name), (kind, header))
    return names


def listed(api_text):
    """(namespace or None, word) pairs docs/api.md lists."""
    pairs = set()
    section = None
    for block in re.split(r"(^#{1,6} [^\n]*$)", api_text, flags=re.M):
        if re.match(r"^#{1,6} ", block):
            spaces = re.findall(r"`(hg(?:::\w+)*)`", block)
            if spaces:
                section = spaces[-1]
            continue
        code = " ".join(re.findall(r"```.*?```", block, flags=re.S))
        code += " " + " ".join(re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", block, flags=re.S)))
        for qualified in re.findall(r"\bhg(?:::\w+)+", code):
            parts = qualified.split("::")
            pairs.add(("::".join(parts[:-1]), parts[-1]))
        for word in re.findall(r"[A-Za-z_]\w*", code):
            pairs.add((section, word))
    return pairs


def main():
    root = Path(sys.argv[1]).resolve()
    names = public_names(root)
    if "--list" in sys.argv:
        for (namespace, name), (kind, header) in sorted(names.items()):
            print(f"{namespace}::{name}  {kind}  {header}")
        return 0
    api_path = root / "docs" / "api.md"
    pairs = listed(api_path.read_text()) if api_path.exists() else set()
    missing = [(ns, n, h) for (ns, n), (_, h) in sorted(names.items()) if (ns, n) not in pairs]
    for namespace, name, header in missing:
        print(f"docs/api.md does not list {namespace}::{name} (declared in {header})")
    print(f"check_api_reference: {len(names)} public names in {len(public_headers(root))} headers, "
          f"{len(missing)} missing from docs/api.md")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
