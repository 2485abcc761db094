"""YAML request bodies, read with the bound kube-apiserver puts on alias expansion.

PyYAML gives an alias the very object its anchor made, so a "billion laughs" body of a few
hundred bytes loads at once but unfolds into gigabytes when it is written to JSON (storing
it, answering it). kube-apiserver's YAML decoder (go-yaml) counts the nodes it decodes and
those that come from aliases, and refuses a document in which aliases make up too large a
share: "yaml: document contains excessive aliasing". The same rule, on the composed node
graph before anything is constructed, counting each node as often as it would be expanded
(memoised per node, so counting a bomb is as cheap as reading it).
"""

from __future__ import annotations

from typing import Any

import yaml

# The pure-Python loader, as `yaml.safe_load`: libyaml refuses a "\ud800" escape that
# kube-apiserver takes (and writes as U+FFFD; server.py `_valid_text`).
_Loader: Any = yaml.SafeLoader

# go-yaml's decoder (yaml.v2 decode.go, allowedAliasRatio): below 400k decoded nodes 99%
# may come from aliases, above 4M only 10%, linearly in between; checked once more than
# 100 aliased and 1000 decoded nodes.
_RATIO_LOW, _RATIO_HIGH = 400_000, 4_000_000
EXCESSIVE_ALIASING = "yaml: document contains excessive aliasing"


class AliasingError(yaml.YAMLError):
    """Aliases would expand the document past go-yaml's bound (or an anchor contains itself)."""


def _allowed_alias_ratio(decoded: int) -> float:
    if decoded <= _RATIO_LOW:
        return 0.99
    if decoded >= _RATIO_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decoded - _RATIO_LOW) / (_RATIO_HIGH - _RATIO_LOW)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def expanded_size(root: yaml.Node) -> tuple[int, int]:
    """(nodes decoded once every alias is expanded, distinct nodes). Iterative: a document
    nested thousands deep must not overflow Python's stack. A node met again while its own
    children are counted is an anchor containing itself: refused, as go-yaml does."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise AliasingError("yaml: anchor value contains itself")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    return sizes[id(root)], len(sizes)


def check_aliasing(root: yaml.Node) -> None:
    decoded, distinct = expanded_size(root)
    aliased = decoded - distinct
    if aliased > 100 and decoded > 1000 and aliased / decoded > _allowed_alias_ratio(decoded):
        raise AliasingError(EXCESSIVE_ALIASING)


def load_body(raw: bytes | str) -> Any:
    """One YAML document, as `yaml.safe_load` reads it, unless aliases expand it too far
    (`AliasingError`, a `yaml.YAMLError`)."""
    loader = _Loader(raw)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_aliasing(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()
