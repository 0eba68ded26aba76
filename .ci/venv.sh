# Sourced by the .ci scripts, which run on Linux, macOS and Windows (Git Bash, as GitHub's
# Windows runners have it): the Python that makes a virtualenv, and where a virtualenv keeps
# its commands.

# `python3` here and on Linux and macOS runners; Windows has `python` alone (the workflow sets PYTHON).
python="${PYTHON:-python3}"

# bin/ on Linux and macOS, Scripts/ on Windows.
venv_bin() {
    if [ -d "$1/Scripts" ]; then echo "$1/Scripts"; else echo "$1/bin"; fi
}

now() { date +%s.%N; }
