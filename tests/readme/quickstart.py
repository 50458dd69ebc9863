"""Runs a quick start of the README as written: quickstart.py README SOURCE_DIR BUILD_DIR VERSION LANGUAGE.

The README marks each block it runs with a comment on the line before the fence:
`<!-- quickstart:LANGUAGE -->` (shell commands, run with `sh -e`) or
`<!-- quickstart:LANGUAGE:FILE -->` (written to FILE first). The commands run in a scratch
directory laid out as the repository root: a copy of bindings/, include/ and the README, and
build/release a link to BUILD_DIR, so that `build/release` in the README names the build under
test. They run with no GPUMEM_LIBRARY, PYTHONPATH, LD_LIBRARY_PATH or GPUMEM_LIB_DIR, and pip and
cargo offline. The output must name VERSION. Exits 77 (a skip) when a tool the quick start needs
is missing.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

MARKER = re.compile(r"^<!-- quickstart:(\w+)(?::([\w./-]+))? -->\n```\w*\n(.*?)^```$", re.M | re.S)

# What each quick start needs, and how to tell that it is missing.
NEEDS = {
    "c": [("cc", None), ("pkg-config", None)],
    "python": [("python3", "import venv, ensurepip")],
    "rust": [("cargo", None)],
}


def missing(language):
    for tool, probe in NEEDS[language]:
        if shutil.which(tool) is None:
            return f"no {tool} on PATH"
        if probe and subprocess.run([tool, "-c", probe], capture_output=True).returncode != 0:
            return f"{tool} cannot make a venv with pip (install python3-venv)"
    return None


def main(readme, source, build, version, language):
    with open(readme, encoding="utf-8") as f:
        blocks = [(lang, name, body) for lang, name, body in MARKER.findall(f.read()) if lang == language]
    if not any(not name for _, name, _ in blocks):
        print(f"{readme}: no <!-- quickstart:{language} --> block of commands")
        return 1
    why = missing(language)
    if why:
        print(f"skipped: {why}")
        return 77

    scratch = tempfile.mkdtemp(prefix=f"gpumem-quickstart-{language}-")
    try:
        ignore = shutil.ignore_patterns("target", "__pycache__", "*.pyc", "build")
        shutil.copytree(os.path.join(source, "bindings"), os.path.join(scratch, "bindings"), ignore=ignore)
        shutil.copytree(os.path.join(source, "include"), os.path.join(scratch, "include"))
        shutil.copy(readme, scratch)
        os.mkdir(os.path.join(scratch, "build"))
        os.symlink(os.path.abspath(build), os.path.join(scratch, "build", "release"))

        env = {k: v for k, v in os.environ.items()
               if k not in ("GPUMEM_LIBRARY", "PYTHONPATH", "LD_LIBRARY_PATH", "GPUMEM_LIB_DIR",
                            "CARGO_TARGET_DIR", "RUSTFLAGS", "PKG_CONFIG_PATH")}
        env.update(PWD=scratch, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1",
                   PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1", CARGO_NET_OFFLINE="true")
        output = ""
        for _, name, body in blocks:
            if name:
                with open(os.path.join(scratch, name), "w", encoding="utf-8") as f:
                    f.write(body)
                continue
            print(body, end="", flush=True)
            run = subprocess.run(["sh", "-ex"], input=body, cwd=scratch, env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            print(run.stdout, end="")
            if run.returncode != 0:
                print(f"the {language} quick start failed: exit status {run.returncode}")
                return 1
            output += run.stdout
        if not re.search(rf"(^|\s){re.escape(version)}\s", output, re.M):
            print(f"the {language} quick start printed no version {version}")
            return 1
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
