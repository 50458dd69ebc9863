#!/usr/bin/env python3
"""Summarizes scripts/test: the tests CTest skipped, grouped by the reason each printed, and then one
verdict line. Reads the JUnit files that `ctest --output-junit` wrote, one per suite.

    scripts/test_summary.py STATUS SECONDS STEP [SUITE=JUNIT]... [--docs ok] [--fuzzers clean]

STATUS is the script's exit status so far and STEP the step it was in when it ended; SUITE=JUNIT
names a suite (dev, asan, tsan) and its file, which may be missing where the suite never ran.
CTest reports a skip (SKIP_RETURN_CODE, SKIP_REGULAR_EXPRESSION) without its reason; gpumem's tests
print theirs ("all tests need a GPU: <the driver's detail>", "GPUMEM-ABI-TEST-SKIPPED: <why>"),
and the JUnit file keeps what each test printed.
"""
import re
import sys
import xml.etree.ElementTree as ET

SKIPS = {"SKIP_RETURN_CODE=77", "SKIP_REGULAR_EXPRESSION_MATCHED"}
NOISE = re.compile(r"^(\[|CMake Error at |Call Stack|-- |\s*$)")  # cmocka's banners, cmake -P framing


def reason_of(output, message):
    """The line a skipped test printed to say why, or CTest's own message where it printed none."""
    lines = [line.strip() for line in (output or "").splitlines() if not NOISE.match(line)]
    said = [line for line in lines if re.search(r"skip|need|no GPU|GPU", line, re.I)]
    reason = (said or lines or [message or "no reason printed"])[0]
    return re.sub(r"^GPUMEM-ABI-TEST-SKIPPED:\s*", "", reason)


def group_of(reason):
    """A group for the table, and the detail after it (the driver's words, say)."""
    detail = reason.split(": ", 1)[1] if ": " in reason else ""
    if re.search(r"\b(2|two) GPUs\b", reason) and not re.search(r"\b0 found|found 0\b", reason):
        return "fewer than 2 GPUs", detail
    if re.search(r"GPU", reason):
        return "no GPU", detail
    return reason, ""


def cmocka_skips(output):
    """The tests a passing cmocka binary skipped inside itself: (its tests, [(test, reason)])."""
    run, said, skipped = 0, [], []
    for line in output.splitlines():
        if line.startswith("[ RUN      ] "):
            run, said = run + 1, []
        elif line.startswith("[  SKIPPED ] ") and not re.match(r"\[  SKIPPED \] \d+ test", line):
            name = line[13:].strip()
            if all(name != t for t, _ in skipped):
                skipped.append((name, said[-1] if said else "no reason printed"))
        elif not NOISE.match(line):
            said.append(line.strip())
    return run, skipped


def read_suite(path):
    """Each test's (name, outcome, output, skip message); outcome is passed, failed, skipped or disabled."""
    tests = []
    for case in ET.parse(path).getroot().iter("testcase"):
        status, skipped = case.get("status"), case.find("skipped")
        output = case.findtext("system-out") or ""
        if status == "disabled":
            outcome = "disabled"
        elif status == "run":
            outcome = "passed"
        elif status == "notrun" and skipped is not None and skipped.get("message") in SKIPS:
            outcome = "skipped"
        else:  # a failure, and also a test that could not start (no executable, a failed fixture)
            outcome = "failed"
        tests.append((case.get("name"), outcome, output, skipped.get("message") if skipped is not None else ""))
    return tests


def names(items, width=100):
    """The items, comma-separated, in lines of at most width characters, none split."""
    lines, line = [], ""
    for item in items:
        if line and len(line) + len(item) + 2 > width - 4:
            lines.append(line + ",")
            line = ""
        line += (", " if line else "") + item
    return "\n".join("    " + text for text in lines + [line])


def main(argv):
    status, seconds, step = int(argv[0]), int(argv[1]), argv[2]
    suites, extras = [], []
    args = iter(argv[3:])
    for arg in args:
        if arg.startswith("--"):
            extras.append(f"{arg[2:]} {next(args)}")
        else:
            suites.append(arg.split("=", 1))

    parts, failures, skips, ran, inner = [], [], {}, {}, {}
    for suite, path in suites:
        try:
            tests = read_suite(path)
        except (OSError, ET.ParseError):
            continue  # the suite did not run (or ctest died before writing its file)
        count = {o: sum(1 for t in tests if t[1] == o) for o in ("passed", "failed", "skipped", "disabled")}
        total = len(tests) - count["disabled"]
        failed = [t[0] for t in tests if t[1] == "failed"]
        if failed:
            failures.append(f"{suite}: {len(failed)} of {total} failed ({', '.join(failed)})")
        part = f"{suite} {count['passed']}/{total} passed"
        if count["skipped"]:
            part += f" ({count['skipped']} skipped)"
        parts.append(part)
        for name, outcome, output, message in tests:
            ran.setdefault(name, []).append(suite)
            if outcome == "passed":
                run, skipped = cmocka_skips(output)
                for test, reason in skipped:
                    group, detail = group_of(reason)
                    entry = inner.setdefault(group, {"details": set(), "binaries": {}})
                    entry["details"].add(detail)
                    entry["binaries"].setdefault(name, (run, set()))[1].add(test)
            if outcome == "skipped":
                group, detail = group_of(reason_of(output, message))
                entry = skips.setdefault(group, {"details": set(), "tests": {}})
                entry["details"].add(detail)
                entry["tests"].setdefault(name, []).append(suite)

    for group, entry in sorted(skips.items(), key=lambda g: (-len(g[1]["tests"]), g[0])):
        details = entry["details"] - {""}
        label = f"{group} ({details.pop()})" if len(details) == 1 else group
        count = len(entry["tests"])
        print(f"skipped: {label}: {count} test{'s' if count != 1 else ''}")
        # A test skipped in only some of the suites that ran it says in which.
        print(names(sorted(name if suites_ == ran[name] else f"{name} ({', '.join(suites_)})"
                           for name, suites_ in entry["tests"].items())))

    # Binaries that passed with some of their cmocka tests skipped (GPU tests in host suites).
    for group, entry in sorted(inner.items()):
        details = entry["details"] - {""}
        label = f"{group} ({details.pop()})" if len(details) == 1 else group
        binaries = entry["binaries"]
        count = sum(len(tests) for _, tests in binaries.values())
        print(f"skipped inside passing tests: {label}: {count} cmocka test{'s' if count != 1 else ''} "
              f"in {len(binaries)} binar{'ies' if len(binaries) != 1 else 'y'}")
        print(names(f"{b} ({len(tests)} of {run})" for b, (run, tests) in sorted(binaries.items())))

    minutes, secs = divmod(seconds, 60)
    took = f"in {minutes} min {secs} s" if minutes else f"in {secs} s"
    if status == 0:
        print(f"scripts/test: PASSED — {', '.join(parts + extras)}, {took}")
        return
    why = "; ".join(failures)
    if not any(step == f"{suite} tests" for suite, _ in suites) or not failures:
        why = "; ".join(filter(None, [f"{step} failed (status {status})", why]))
    done = f"; before it: {', '.join(parts + extras)}" if (parts or extras) and not failures else ""
    print(f"scripts/test: FAILED — {why}{done}, {took}")


if __name__ == "__main__":
    main(sys.argv[1:])
