"""The longest non-test functions of the workspace's sources, src/ and crates/ (lines from `fn` to its closing brace): `python3 tools/long_functions.py [DIR...]`, `TOP=40` for more (issue 37, item 6)."""
import os, re, sys
roots = sys.argv[1:] or ["src", "crates"]
rows = []
for dp, _, fs in (w for r in roots for w in os.walk(r)):
    for f in fs:
        # a module's tests in a file of their own (`#[cfg(test)] mod tests;`, or a folder of
        # them such as asa-engine's `cuda_tests/`) are tests too, as are a crate's `tests/`
        parts = os.path.normpath(dp).split(os.sep)
        in_crate_tests = parts[:1] == ["crates"] and parts[2:3] == ["tests"]
        if not f.endswith(".rs") or f == "tests.rs" or dp.endswith("_tests") or in_crate_tests: continue
        p = os.path.join(dp, f)
        lines = open(p).read().split("\n")
        # cut at the test module
        end = len(lines)
        for i, l in enumerate(lines):
            if l.startswith("#[cfg(test)]"):
                end = i; break
        i = 0
        while i < end:
            m = re.match(r'\s*(pub(\([a-z]+\))?\s+)?(const\s+)?(unsafe\s+)?fn\s+(\w+)', lines[i])
            if m and not lines[i].strip().startswith("//"):
                name = m.group(5)
                depth = 0; started = False; j = i
                while j < end:
                    code = re.sub(r'"(\\.|[^"\\])*"', '""', lines[j])
                    code = re.sub(r"'(\\.|[^'\\])'", "''", code)
                    code = code.split("//")[0]
                    for ch in code:
                        if ch == '{': depth += 1; started = True
                        elif ch == '}': depth -= 1
                    if started and depth == 0: break
                    if not started and code.rstrip().endswith(";"): break
                    j += 1
                if started:
                    rows.append((j - i + 1, f"{p}:{i+1}", name))
                i += 1
            else:
                i += 1
rows.sort(reverse=True)
for n, where, name in rows[:int(os.environ.get("TOP", "12"))]:
    print(f"{n:4d}  {name:32s} {where}")
print("over 80:", sum(1 for r in rows if r[0] > 80))
