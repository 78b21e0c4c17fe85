"""`tickd completion bash|zsh`: a completion script made from the parser itself, so that it
knows every command and option."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any


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
        else:
            words += [o for o in action.option_strings if o.startswith("--")]
            if action.choices and not action.option_strings:
                words += [str(c) for c in action.choices]
    yield path, words
    for sub_path, sub in below:
        yield from command_words(sub, sub_path)


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    table = "\n".join(
        f'    ["{path}"]="{" ".join(words)}"' for path, words in command_words(parser)
    )
    script = f"""# tickd {shell} completion: source <(tickd completion {shell})
declare -gA _tickd_words=(
{table}
)
_tickd() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" path="" word
    for word in "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"; do
        [[ -n "${{_tickd_words["$path $word"]+set}}" ]] && path="$path $word"
    done
    COMPREPLY=($(compgen -W "${{_tickd_words["$path"]}}" -- "$cur"))
}}
complete -o default -F _tickd tickd
"""
    if shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    return script


def run_completion(parser: argparse.ArgumentParser, args: Any) -> int:
    sys.stdout.write(completion_script(parser, args.shell))
    return 0
