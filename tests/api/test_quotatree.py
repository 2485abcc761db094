"""The ElasticQuotaTree read into the quotas an ElasticQuota gives: each node, each kind of
bad input said (and the rest kept), which tree is used, and the status written back."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.api.objects import QuotaInfo, parse_elastic_quota
from koordqueue.api.quotatree import (
    TREE_QUOTA_NAMESPACE,
    choose_tree,
    parse_quota_tree,
    tree_queue_prefix,
    tree_status,
)
from koordqueue.engine.validation import validate_quotas

WHERE = "ElasticQuotaTree kube-system/tree"


def tree(root: dict[str, Any], name: str = "tree", namespace: str = "kube-system",
         created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {"apiVersion": c.QUOTA_TREE_API_VERSION, "kind": c.ELASTIC_QUOTA_TREE_KIND,
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
            "spec": {"root": root}}


def node(name: str, min_gpu: int | str = 0, max_gpu: int | str = 8, **more: Any) -> dict[str, Any]:
    return {"name": name, "min": {c.GPU: min_gpu}, "max": {c.GPU: max_gpu}, **more}


# Koord-Queue's own example (Alibaba Cloud's capacity scheduling guide), GPUs only.
EXAMPLE = node("root", 4, 4, children=[
    node("root.a", 2, 4, children=[node("root.a.1", 1, 2, namespaces=["namespace1"]),
                                   node("root.a.2", 1, 2, namespaces=["namespace2"])]),
    node("root.b", 2, 4, children=[node("root.b.1", 1, 2, namespaces=["namespace3"]),
                                   node("root.b.2", 1, 2, namespaces=["namespace4"])]),
])


def test_each_node_is_the_quota_an_elastic_quota_would_be() -> None:
    parsed = parse_quota_tree(tree(EXAMPLE))
    assert parsed.problems == () and parsed.warnings == ()
    assert list(parsed.quotas) == ["root", "root.a", "root.a.1", "root.a.2", "root.b", "root.b.1", "root.b.2"]
    assert parsed.paths["root.b.2"] == "root/root.b/root.b.2"  # Koord-Queue's full name
    assert parsed.quotas["root"] == QuotaInfo("root", TREE_QUOTA_NAMESPACE, {c.GPU: 4000}, {c.GPU: 4000},
                                              parent=None, is_parent=True)
    assert parsed.quotas["root.a"] == QuotaInfo("root.a", TREE_QUOTA_NAMESPACE, {c.GPU: 2000}, {c.GPU: 4000},
                                                parent="root", is_parent=True)
    assert parsed.quotas["root.a.1"] == QuotaInfo("root.a.1", TREE_QUOTA_NAMESPACE, {c.GPU: 1000}, {c.GPU: 2000},
                                                  parent="root.a", namespaces=frozenset({"namespace1"}))
    assert validate_quotas(parsed.quotas) == {}  # the engine takes the tree as it is


def test_attributes_are_read_as_an_elastic_quotas_labels_and_annotations() -> None:
    attributes = {c.LABEL_QUEUE_POLICY: "Block", c.LABEL_ALLOW_LENT_RESOURCE: c.FALSE,
                  c.ANNOTATION_SHARED_WEIGHT: '{"nvidia.com/gpu": "3"}', c.ANNOTATION_PRIORITY_THRESHOLD: "7"}
    parsed = parse_quota_tree(tree(node("root", 8, 8, children=[node("a", 2, 8, attributes=attributes,
                                                                     namespaces=["ns-a"])])))
    quota = parsed.quotas["a"]
    assert (quota.policy, quota.allow_lent, quota.shared_weight, quota.priority_threshold) == (
        c.QueuePolicy.BLOCK, False, {c.GPU: 3000}, 7)


def test_the_default_policy_of_the_settings_applies_to_nodes_that_name_none() -> None:
    def block_by_default(obj: object) -> Any:
        from dataclasses import replace
        parsed = parse_elastic_quota(obj)
        return replace(parsed, quota=replace(parsed.quota, policy=c.QueuePolicy.BLOCK))

    parsed = parse_quota_tree(tree(EXAMPLE), block_by_default)
    assert {q.policy for q in parsed.quotas.values()} == {c.QueuePolicy.BLOCK}


BAD_NODES: list[tuple[str, Any, list[str], str]] = [
    # (case, a child of the root, the quotas kept, the problem)
    ("duplicate name", node("dup", children=[node("x")]) | {"name": "a"}, ["root", "a", "b"],
     f"{WHERE}: quota root/a: not used: the name a is taken by the quota before it at root/a "
     "(quota names are unique); nor the 1 quota below it"),
    ("bad quantity", node("q", max_gpu="eight"), ["root", "a", "b"],
     f"{WHERE}: quota root/q: not used: spec.max: nvidia.com/gpu: quantity 'eight' is not a number with an "
     "optional suffix (examples: 100m, 8, 1.5, 2e3, 200Gi)"),
    ("no name", {"max": {c.GPU: 1}}, ["root", "a", "b"],
     f"{WHERE}: spec.root.children[2]: not used: name is missing or not a string"),
    ("namespaces not a list", node("n", namespaces="team-n"), ["root", "a", "b"],
     f"{WHERE}: quota root/n: not used: namespaces must be a list of namespace names"),
    ("attributes not strings", node("t", attributes={c.ANNOTATION_PRIORITY_THRESHOLD: 7}), ["root", "a", "b"],
     f"{WHERE}: quota root/t: not used: attributes must map strings to strings (quote numbers and booleans)"),
    ("children not a list", node("k", children={"name": "x"}), ["root", "a", "b"],
     f"{WHERE}: quota root/k: not used: children must be a list of quotas"),
    ("a node that is not a mapping", "just-a-name", ["root", "a", "b"],
     f"{WHERE}: quota root: spec.root.children[2]: not used: a quota must be a mapping"),
]


@pytest.mark.parametrize(("bad", "kept", "problem"), [b[1:] for b in BAD_NODES], ids=[b[0] for b in BAD_NODES])
def test_a_bad_node_is_left_out_with_the_quotas_below_it_and_said(bad: Any, kept: list[str], problem: str) -> None:
    parsed = parse_quota_tree(tree(node("root", 8, 8, children=[node("a", 2, 4), node("b", 2, 4), bad])))
    assert list(parsed.quotas) == kept
    assert parsed.problems == (problem,)


def test_what_the_engine_refuses_it_refuses_in_a_tree_too() -> None:
    """min > max and children's mins beyond the parent's: read here, refused by the engine's
    validation (the controller reports it on the tree)."""
    parsed = parse_quota_tree(tree(node("root", 8, 8, children=[node("up", 8, 2), node("a", 6, 8),
                                                                node("b", 6, 8)])))
    assert parsed.problems == ()
    reasons = validate_quotas(parsed.quotas)
    assert reasons["up"] == "min of nvidia.com/gpu (8) is more than its max (2)"
    assert "b" in reasons and "a" not in reasons  # children accepted in name order while their mins fit


@pytest.mark.parametrize(("root", "problem"), [
    (None, f"{WHERE}: spec.root is missing or not a mapping"),
    ([], f"{WHERE}: spec.root is missing or not a mapping"),
])
def test_a_tree_without_a_root_cannot_be_read(root: Any, problem: str) -> None:
    with pytest.raises(InvalidObject, match="spec.root is missing"):
        parse_quota_tree(tree(root))


def test_warnings_name_what_is_read_otherwise_and_the_rest_is_used() -> None:
    root = node("top", 8, 8, children=[
        node("p", 4, 8, namespaces=["ns-p"], children=[node("leaf", 1, 2, namespaces=["shared"])]),
        node("Other_Team", 1, 2, namespaces=["shared"],
             attributes={c.TREE_ATTRIBUTE_PREEMPT_POLICY: "PreemptLowerPriority", c.LABEL_QUEUE_POLICY: "Round"}),
    ])
    parsed = parse_quota_tree(tree(root))
    assert list(parsed.quotas) == ["root", "p", "leaf", "Other_Team"]
    assert parsed.quotas["p"].namespaces == frozenset()  # a parent holds no jobs
    assert parsed.quotas["Other_Team"].policy == c.QueuePolicy.PRIORITY
    assert parsed.warnings == (
        f"{WHERE}: the root is named root, whatever spec.root.name says ('top'), as Koord-Queue names it",
        f"{WHERE}: quota root/p: namespaces ns-p not bound: a quota with children holds no jobs "
        "(list them on a quota below it)",
        f"{WHERE}: quota root/Other_Team: attribute koord-queue/queue-policy: unknown queue policy 'Round' "
        "(known: Priority, Block, Intelligent); using Priority",
        f"{WHERE}: quota root/Other_Team: attribute preempt-policy is not read (Koord-Queue lets a job that may "
        "not be preempted preempt lower priorities in its quota; here preemption is set on the Queue "
        "(koord-queue/enable-queueunit-preemption))",
        f"{WHERE}: namespace shared is listed by several quotas (leaf, Other_Team): its jobs wait until they "
        f"name one (label {c.LABEL_QUOTA_NAME})",
    )


def test_a_leafs_queue_is_named_from_its_path_as_koord_queue_names_it() -> None:
    """elastic_quota_tree.go convertQuotaToQueueName: lowercased, '/' and '_' to '-', a
    trailing '-', cut from the front to 58 characters; a name no Queue can take is said."""
    assert tree_queue_prefix("root/team-a") == "root-team-a-"
    assert tree_queue_prefix("root/Team_B/b_1") == "root-team-b-b-1-"
    long = "root/" + "x" * 80
    assert tree_queue_prefix(long) == ("root-" + "x" * 80 + "-")[-58:] and len(tree_queue_prefix(long)) == 58
    parsed = parse_quota_tree(tree(node("root", 2, 2, children=[node("a b", 1, 1, namespaces=["n"])])))
    assert parsed.warnings == (
        f"{WHERE}: quota root/a b: no Queue is made for it (the name Koord-Queue gives its Queue, root-a b-..., "
        "is not a valid object name: letters, digits, '-', '_' and '.' in the quotas' names); its jobs are "
        "queued all the same",)


def test_the_oldest_tree_in_kube_system_is_used_and_the_others_told_why() -> None:
    newer, older = tree(EXAMPLE, "newer", created="2026-02-01T00:00:00Z"), tree(EXAMPLE, "older")
    elsewhere = tree(EXAMPLE, "elsewhere", namespace="default", created="2025-01-01T00:00:00Z")
    used, refused = choose_tree([newer, elsewhere, older])
    assert used is older
    assert refused == [
        (elsewhere, "not used: an ElasticQuotaTree is read in namespace kube-system only"),
        (newer, "not used: ElasticQuotaTree kube-system/older holds the quotas (one tree per cluster: the oldest)"),
    ]
    assert choose_tree([elsewhere])[0] is None


def test_the_status_mirrors_the_tree_with_used_and_request_per_node() -> None:
    obj = tree(node("root", 4, 4, children=[node("a", 2, 4, namespaces=["ns-a"]), node("a", 1, 1),
                                            node("b", 2, 4, namespaces=["ns-b"])]))
    parsed = parse_quota_tree(obj)
    status = tree_status(obj, parsed, {"root": {c.GPU: 3000}, "a": {c.GPU: 3000}},
                         {"root": {c.GPU: 4000}, "a": {c.GPU: 4000}}, list(parsed.problems))
    assert status == {
        "problems": list(parsed.problems),
        "root": {"name": "root", "used": {c.GPU: "3"}, "request": {c.GPU: "4"}, "children": [
            {"name": "a", "namespaces": ["ns-a"], "used": {c.GPU: "3"}, "request": {c.GPU: "4"}},
            {"name": "a"},  # the second "a" is not used: no figures
            {"name": "b", "namespaces": ["ns-b"], "used": {c.GPU: "0"}, "request": {c.GPU: "0"}},
        ]},
    }
    assert len(parsed.problems) == 1
