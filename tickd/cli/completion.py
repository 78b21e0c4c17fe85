"""`tickd completion bash|zsh`: a completion script made from the parser itself, so that it
knows every command and option; and, where a job goes (a JOB argument, `--job`), the names of
the API's jobs, asked of it by `tickd completion --job-names PREFIX` (bounded, silent on error).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from typing import Any

# The command path of `tickd` itself: every key of the script's table starts with it, as bash
# 5.2 refuses an empty subscript of an associative array ("bad array subscript").
ROOT_PATH = "tickd"
# How long completion waits for the API, and how many names it offers at most.
JOB_NAMES_TIMEOUT_SECONDS = 2.0
JOB_NAMES_LIMIT = 100


def command_words(
    parser: argparse.ArgumentParser, path: str = ""
) -> Iterator[tuple[str, list[str]]]:
    """For each command path (`""`, `" jobs"`, `" jobs list"`...), the words that may follow:
    its sub-commands and its options."""
    words: list[str] = []
    below: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                words.append(name)
                below.append((f"{path} {name}", sub))
        elif action.help != argparse.SUPPRESS:
            words += [o for o in action.option_strings if o.startswith("--")]
            if action.choices and not action.option_strings:
                words += [str(c) for c in action.choices]
    yield path, words
    for sub_path, sub in below:
        yield from command_words(sub, sub_path)


def job_paths(parser: argparse.ArgumentParser, path: str = "") -> Iterator[str]:
    """The command paths that take a job as their argument (`" jobs show"`...)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from job_paths(sub, f"{path} {name}")
        elif not action.option_strings and action.metavar == "JOB":
            yield path


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    table = "\n".join(
        f'    ["{ROOT_PATH}{path}"]="{" ".join(words)}"' for path, words in command_words(parser)
    )
    takes_job = "\n".join(f'    ["{ROOT_PATH}{path}"]=1' for path in job_paths(parser))
    script = f"""# tickd {shell} completion: source <(tickd completion {shell})
declare -gA _tickd_words=(
{table}
)
declare -gA _tickd_takes_job=(
{takes_job}
)
_tickd() {{
    local prev="" path="{ROOT_PATH}" cur word choices colon i
    local -a typed=() api=()
    # Bash splits a word at each ":" (COMP_WORDBREAKS); job names and URLs hold them: joined.
    for ((i = 0; i <= COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        if ((i > 0)) && [[ "$word" == : || "${{COMP_WORDS[i-1]}}" == : ]]; then
            typed[${{#typed[@]}}-1]+="$word"
        else
            typed+=("$word")
        fi
    done
    cur="${{typed[${{#typed[@]}}-1]}}"
    for word in "${{typed[@]:1:${{#typed[@]}}-2}}"; do
        [[ -n "${{_tickd_words["$path $word"]+set}}" ]] && path="$path $word"
        [[ "$prev" == --url || "$prev" == --token ]] && api+=("$prev" "$word")
        prev="$word"
    done
    choices="${{_tickd_words["$path"]}}"
    if [[ "$prev" == --job || ( -n "${{_tickd_takes_job["$path"]+set}}" && "$cur" != -* ) ]]; then
        choices="$choices $(command tickd completion "${{api[@]}}" --job-names "$cur" 2>/dev/null)"
    fi
    COMPREPLY=($(compgen -W "$choices" -- "$cur"))
    # Bash replaces only the part after the last ":" of the word: the part before it goes.
    if [[ "$cur" == *:* ]]; then
        colon="${{cur%"${{cur##*:}}"}}"
        COMPREPLY=("${{COMPREPLY[@]#"$colon"}}")
    fi
}}
complete -o default -F _tickd tickd
"""
    if shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    return script


def run_completion(parser: argparse.ArgumentParser, args: Any) -> int:
    if args.job_names is not None:
        print_job_names(args.job_names, args.url, args.token)
        return 0
    if args.shell is None:
        parser.error("completion: give a shell, bash or zsh")
    sys.stdout.write(completion_script(parser, args.shell))
    return 0


def print_job_names(prefix: str, url: str | None, token: str | None) -> None:
    """The names of the API's jobs starting with `prefix`, one a line; nothing at all when the
    API cannot say within JOB_NAMES_TIMEOUT_SECONDS: a completion never prints an error."""
    # The API's client loads only here: the script itself needs neither it nor httpx.
    from tickd.cli.parser import DEFAULT_URL, TOKEN_ENV, URL_ENV
    from tickd.client import Client, ClientError, Retry

    where = url or os.environ.get(URL_ENV) or DEFAULT_URL
    try:
        with Client(
            where,
            token=token or os.environ.get(TOKEN_ENV) or None,
            timeout=JOB_NAMES_TIMEOUT_SECONDS,
            retry=Retry(attempts=1),
        ) as client:
            page = client.list_jobs(name_prefix=prefix or None, limit=JOB_NAMES_LIMIT)
    except (ClientError, ValueError):
        return
    for job in page.items:
        print(job.name)
