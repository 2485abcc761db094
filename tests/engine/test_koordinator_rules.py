"""Our quota validation beside koord-manager's ElasticQuota webhook (Koordinator v1.8.0,
pkg/webhook/elasticquota, at its default feature gates), rule by rule.

Each row builds the ElasticQuota objects of one of Koordinator's own test cases (named
in the row: ``quota_topology_test.go`` unless said otherwise) and says what koord-manager
answers, in its words, beside what we answer. The goal is one verdict for one tree: a
tree we use is a tree koord-manager accepts. The few rows where the verdicts differ are
named in ``DIFFERENT`` and said in docs/quota-model.md; tests/kubecluster/
test_koordinator_rules.py asks the real koord-manager the same questions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.api.objects import InvalidObject, parse_elastic_quota
from koordqueue.engine.model import QuotaInfo
from koordqueue.engine.validation import validate_quotas
from koordqueue.realcluster import build
from koordqueue.realcluster.cluster import KOORDINATOR_MODULE

ROOT = c.KOORDINATOR_ROOT_QUOTA


def eq(name: str, *, max_: dict[str, Any] | None = None, min_: dict[str, Any] | None = None,
       parent: str | None = None, is_parent: str | None = None, ns: str = "default",
       namespaces: list[str] | None = None, tree_id: str | None = None,
       shared_weight: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """An ElasticQuota object as a person writes it (Koordinator's MakeQuota, in YAML's terms)."""
    meta_labels = dict(labels or {})
    annotations: dict[str, str] = {}
    if parent is not None:
        meta_labels[c.LABEL_QUOTA_PARENT] = parent
    if is_parent is not None:
        meta_labels[c.LABEL_QUOTA_IS_PARENT] = is_parent
    if tree_id is not None:
        meta_labels[c.LABEL_QUOTA_TREE_ID] = tree_id
    if namespaces is not None:
        annotations[c.ANNOTATION_QUOTA_NAMESPACES] = json.dumps(namespaces)
    if shared_weight is not None:
        annotations[c.ANNOTATION_SHARED_WEIGHT] = json.dumps(shared_weight)
    spec: dict[str, Any] = {"max": max_ or {}}
    if min_ is not None:
        spec["min"] = min_
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": c.ELASTIC_QUOTA_KIND,
            "metadata": {"name": name, "namespace": ns, "labels": meta_labels, "annotations": annotations},
            "spec": spec}


def ours(objects: list[dict[str, Any]]) -> dict[str, str]:
    """What our validation says of ``objects``, read as the controller reads them."""
    quotas: dict[str, QuotaInfo] = {}
    unreadable: dict[str, str] = {}  # the controller's "quota not used: <why>" for these
    for obj in objects:
        try:
            quota = parse_elastic_quota(obj).quota
        except InvalidObject as err:
            unreadable[obj["metadata"]["name"]] = err.reason
            continue
        quotas[quota.name] = quota
    return validate_quotas(quotas) | unreadable


CM = {"cpu": "120", "memory": "1Mi"}  # the max most of Koordinator's cases give


@dataclass(frozen=True)
class Rule:
    id: str
    koordinator: str  # Koordinator's test (Test.../case) or function that states the rule
    objects: list[dict[str, Any]]  # the last one is the quota in question; the others are there before it
    theirs: str | None  # koord-manager's answer (its error text); None: accepted
    ours: str | None  # our reason for not using it; None: used


RULES = [
    # validateQuotaSelfItem: the quota's own lists.
    Rule("own-admit", "TestQuotaTopology_basicItemCheck/admit",
         [eq("temp", max_=CM)], None, None),
    Rule("own-max-negative", "TestQuotaTopology_basicItemCheck/max < 0",
         [eq("temp", max_={"cpu": "-1", "memory": "1Mi"})],
         "temp quota.Spec.Max's value < 0, in dimensions :[cpu]",
         "ElasticQuota default/temp: spec.max: cpu: quantity '-1' is negative; only amounts >= 0 are allowed"),
    Rule("own-min-negative", "TestQuotaTopology_basicItemCheck/min < 0",
         [eq("temp", min_={"cpu": "-1"}, max_={"cpu": "1", "memory": "1Mi"})],
         "temp quota.Spec.Min's value < 0, in dimensions :[cpu]",
         "ElasticQuota default/temp: spec.min: cpu: quantity '-1' is negative; only amounts >= 0 are allowed"),
    Rule("own-min-key-not-in-max", "TestQuotaTopology_basicItemCheck/min dimension larger than max",
         [eq("temp", min_={"cpu": "1", "memory": "1Mi"}, max_={"cpu": "10"})],
         "resourceKey memory of quota temp is included in min, which is not included in max",
         "min names memory, which max does not"),
    Rule("own-min-above-max", "TestQuotaTopology_basicItemCheck/min > max",
         [eq("temp", min_={"cpu": "12"}, max_={"cpu": "10"})],
         "resourceKey cpu of quota temp min 12 > max 10", "min of cpu (12) is more than its max (10)"),
    Rule("own-shared-weight-negative", "TestQuotaTopology_basicItemCheck/annotation sharedWeight < 0",
         [eq("temp", max_={"cpu": "0", "memory": "1Mi"}, shared_weight={"cpu": "-1", "memory": "1Mi"})],
         "temp quota.Annotation[quota.scheduling.koordinator.sh/shared-weight]'s value < 0, in dimension :[cpu]",
         f"ElasticQuota default/temp: annotation {c.ANNOTATION_SHARED_WEIGHT}: cpu: quantity '-1' is negative; "
         "only amounts >= 0 are allowed"),
    Rule("own-shared-weight-not-json", "fillQuotaDefaultInformation",
         [{**eq("temp", max_=CM), "metadata": {"name": "temp", "namespace": "default",
                                              "annotations": {c.ANNOTATION_SHARED_WEIGHT: "{cpu: 4"}}}],
         "fillDefaultQuotaInfo unmarshal sharedWeight failed:invalid character 'c' looking for beginning of "
         "object key string",
         f"ElasticQuota default/temp: annotation {c.ANNOTATION_SHARED_WEIGHT}: Expecting property name enclosed "
         "in double quotes: line 1 column 2 (char 1)"),
    # fillQuotaDefaultInformation (mutating) and checkParentQuotaInfo: the parent.
    Rule("parent-empty-is-root", "TestQuotaTopology_ValidAddQuota",
         [eq("temp", max_=CM, min_={"cpu": "64"}, is_parent="true")], None, None),
    Rule("parent-root-named", "validateQuotaTopology",
         [eq("temp", max_=CM, parent=ROOT)], None, None),
    Rule("parent-missing", "fillQuotaDefaultInformation",
         [eq("sub", max_=CM, parent="ghost")],
         "fill quota sub failed, parent not exist", "its parent quota ghost does not exist"),
    Rule("parent-not-is-parent", "TestQuotaTopology_checkParentQuotaInfoExist",
         [eq("temp", max_=CM, min_={"cpu": "64"}, is_parent="false"), eq("sub", max_=CM, parent="temp")],
         "sub has parentName temp but the parentQuotaInfo's IsParent is false",
         'its parent quota temp is not marked as a parent (label is-parent: "true")'),
    Rule("parent-is-parent-exactly-true", "TestQuotaTopology_checkParentQuotaInfoExist",
         [eq("temp", max_=CM, is_parent="True"), eq("sub", max_=CM, parent="temp")],
         "sub has parentName temp but the parentQuotaInfo's IsParent is false",
         'its parent quota temp is not marked as a parent (label is-parent: "true")'),
    Rule("parent-koordinators-system-quota", "checkParentQuotaInfo",
         [eq("sub", max_=CM, parent=c.KOORDINATOR_SYSTEM_QUOTA)],
         "sub has parentName koordinator-system-quota but the parentQuotaInfo's IsParent is false",
         "its parent quota koordinator-system-quota is Koordinator's own, which has no children"),
    # checkSubAndParentGroupQuotaKey: the resources a child names.
    Rule("keys-same", "TestQuotaTopology_checkSubAndParentGroupMaxQuotaKeySame/"
         "its max has same dimension with parent's,but be included, enableResourceTypeUpdate = false",
         [eq("temp", max_={"cpu": "10"}, is_parent="true"), eq("temp-bu1", max_={"cpu": "120"}, parent="temp")],
         None, None),
    Rule("keys-max-not-in-parent", "TestQuotaTopology_checkSubAndParentGroupMaxQuotaKeySame/"
         "its max has different dimension with parent's,not be included, enableResourceTypeUpdate = true",
         [eq("temp", max_={"memory": "120"}, is_parent="true"), eq("temp-bu1", max_={"cpu": "120"}, parent="temp")],
         "checkSubAndParentGroupQuotaKey failed: temp's max keys are not the same with temp-bu1's",
         "its max names cpu, which the max of its parent quota temp does not"),
    Rule("keys-max-fewer-than-parent", "TestQuotaTopology_checkSubAndParentGroupMaxQuotaKeySame/"
         "its max has different dimension with parent's,but be included, enableResourceTypeUpdate = false",
         [eq("temp", max_={"cpu": "10", "memory": "120"}, is_parent="true"),
          eq("temp-bu1", max_={"cpu": "120"}, parent="temp")],
         "checkSubAndParentGroupQuotaKey failed: temp's max keys are not the same with temp-bu1's", None),
    Rule("keys-min-included", "TestQuotaTopology_checkSubAndParentGroupMaxQuotaKeySame/"
         "its min has different dimension with parent's,but be included, enableResourceTypeUpdate = false",
         [eq("temp", min_={"cpu": "10", "memory": "120"}, max_={"cpu": "10", "memory": "120"}, is_parent="true"),
          eq("temp-bu1", min_={"cpu": "10"}, max_={"cpu": "120", "memory": "120"}, parent="temp")], None, None),
    Rule("keys-min-not-included", "TestQuotaTopology_checkSubAndParentGroupMaxQuotaKeySame/"
         "its min has different dimension with parent's,not be all included, enableResourceTypeUpdate = false",
         [eq("temp", min_={"cpu": "10"}, max_={"cpu": "10", "memory": "120"}, is_parent="true"),
          eq("temp-bu1", min_={"cpu": "10", "memory": "0"}, max_={"cpu": "120", "memory": "120"}, parent="temp")],
         "checkSubAndParentGroupQuotaKey failed: temp-bu1's min keys are not all included in temp's",
         "its min names memory, which the min of its parent quota temp does not"),
    Rule("keys-parent-names-nothing", "TestQuotaTopology_checkMinQuotaSum/parent no resource",
         [eq("temp-no-min", is_parent="true"),
          eq("sub-1", min_={"cpu": "19", "memory": "50Ki"}, max_=CM, parent="temp-no-min")],
         "checkSubAndParentGroupQuotaKey failed: temp-no-min's max keys are not the same with sub-1's",
         "its max names cpu, memory, which the max of its parent quota temp-no-min does not"),
    # checkMinQuotaValidate: the siblings' mins.
    Rule("mins-fit", "TestQuotaTopology_checkMinQuotaSum/satisfy",
         [eq("temp", min_={"cpu": "19", "memory": "50Ki"}, max_=CM, is_parent="true"),
          eq("sub-1", min_={"cpu": "16", "memory": "12800"}, max_=CM, parent="temp")], None, None),
    Rule("mins-over-parent", "TestQuotaTopology_checkMinQuotaSum/parentQuotaInfo not satisfy",
         [eq("temp", min_={"cpu": "10", "memory": "50Ki"}, max_=CM, is_parent="true"),
          eq("sub-1", min_={"cpu": "16", "memory": "12800"}, max_=CM, parent="temp")],
         "checkMinQuotaSum all brothers' MinQuota > parent MinQuota, parent: temp",
         "the mins of the children of temp would add up to 16 of cpu, more than its min (10)"),
    Rule("mins-over-parent-with-sibling", "checkMinQuotaValidate",
         [eq("temp", min_={"cpu": "20"}, max_=CM, is_parent="true"),
          eq("sub-1", min_={"cpu": "16"}, max_=CM, parent="temp"),
          eq("sub-2", min_={"cpu": "16"}, max_=CM, parent="temp")],
         "checkMinQuotaSum all brothers' MinQuota > parent MinQuota, parent: temp",
         "the mins of the children of temp would add up to 32 of cpu, more than its min (20)"),
    Rule("mins-force-update", "checkMinQuotaValidate",
         [eq("temp", min_={"cpu": "10"}, max_=CM, is_parent="true"),
          eq("sub-1", min_={"cpu": "16"}, max_=CM, parent="temp",
             labels={"quota.scheduling.koordinator.sh/allow-force-update": "true"})],
         None, "the mins of the children of temp would add up to 16 of cpu, more than its min (10)"),
    # checkTreeID: the tree a quota belongs to.
    Rule("tree-same", "TestQuotaTopology_checkTreeID/satisfy with tree id",
         [eq("parent", max_=CM, is_parent="true", tree_id="tree-1"),
          eq("temp", max_=CM, parent="parent", is_parent="true", tree_id="tree-1"),
          eq("child", max_=CM, parent="temp", tree_id="tree-1")], None, None),
    Rule("tree-parent-has-none", "TestQuotaTopology_checkTreeID/parent no tree id",
         [eq("parent", max_=CM, is_parent="true"),
          eq("temp", max_=CM, parent="parent", is_parent="true", tree_id="tree-1")],
         "temp tree id is different from parent parent, [tree-1] vs []",
         f"its label {c.LABEL_QUOTA_TREE_ID} (tree-1) is not its parent quota parent's (none): "
         "a child is in its parent's tree"),
    Rule("tree-other", "checkTreeID",
         [eq("parent", max_=CM, is_parent="true", tree_id="tree-1"),
          eq("temp", max_=CM, parent="parent", tree_id="tree-2")],
         "temp tree id is different from parent parent, [tree-2] vs [tree-1]",
         f"its label {c.LABEL_QUOTA_TREE_ID} (tree-2) is not its parent quota parent's (tree-1): "
         "a child is in its parent's tree"),
    Rule("tree-inherited", "TestQuotaTopology_fillQuotaDefaultInformation/parent quota with treeID",
         [eq("parent", max_=CM, is_parent="true", tree_id="tree-1"),
          eq("temp", max_=CM, parent="parent", is_parent="true"),
          eq("child", max_=CM, parent="temp", tree_id="tree-1")], None, None),
    # ValidAddQuota: namespaces.
    Rule("namespace-taken", "TestQuotaTopology_AnnotationNamespaces",
         [eq("temp", max_=CM, namespaces=["test1", "test2"]),
          eq("temp2", max_=CM, namespaces=["test1", "test2"], ns="other")],
         "AddQuota quota temp2's annotation namespace test1 is already bound to quota temp",
         f"namespace test1 is already bound to quota temp (annotation {c.ANNOTATION_QUOTA_NAMESPACES}): "
         "a namespace is bound to one quota"),
    Rule("namespace-own-not-counted", "ValidAddQuota",
         [eq("temp", max_=CM, ns="test1"), eq("temp2", max_=CM, namespaces=["test1"], ns="other")], None, None),
]

# Where the verdicts differ, and why we keep ours (docs/quota-model.md says the same).
DIFFERENT = {
    # koord-manager at its default gates wants a child's max to name all of its parent's
    # resources; with ElasticQuotaEnableUpdateResourceKey it accepts fewer, as we do: the
    # parent then limits the rest alone (tests/engine/test_quota.py).
    "keys-max-fewer-than-parent": "looser",
    # allow-force-update lets Koordinator's children promise more min than the parent has;
    # we keep every min backed by the parent's, or min would not be guaranteed.
    "mins-force-update": "stricter",
}


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_our_verdict_beside_koord_managers(rule: Rule) -> None:
    reasons = ours(rule.objects)
    name = rule.objects[-1]["metadata"]["name"]
    assert reasons.get(name) == rule.ours, rule.koordinator
    # The quotas that were there before it stay as they were: only the newcomer is refused.
    assert set(reasons) <= {name}, reasons
    refused_there, refused_here = rule.theirs is not None, rule.ours is not None
    if rule.id in DIFFERENT:
        assert refused_here == (DIFFERENT[rule.id] == "stricter") and refused_there != refused_here
    else:
        assert refused_here == refused_there, f"{rule.koordinator}: koord-manager says {rule.theirs!r}"


def test_the_rules_cover_koord_managers_answers() -> None:
    """Every error of validateQuotaSelfItem and validateQuotaTopology that a tree of quotas
    (not an update, a delete or a gate) can meet has a row, with its wording."""
    answered = " | ".join(r.theirs for r in RULES if r.theirs)
    for words in ("quota.Spec.Max's value < 0", "quota.Spec.Min's value < 0", "which is not included in max",
                  " > max ", "shared-weight]'s value < 0", "unmarshal sharedWeight failed", "parent not exist", "IsParent is false",
                  "max keys are not the same", "min keys are not all included", "all brothers' MinQuota",
                  "tree id is different from parent", "is already bound to quota"):
        assert words in answered, words


def test_koordinators_own_quotas_are_left_to_it() -> None:
    """koordinator-root-quota as a parent is our root; koord-manager never checks its own."""
    reasons = ours([eq("team", max_=CM, parent=ROOT, is_parent="true"), eq("a", max_=CM, parent="team")])
    assert reasons == {}
    assert parse_elastic_quota(eq("a", max_=CM, parent=ROOT)).quota.parent is None


def test_the_verdict_does_not_depend_on_arrival() -> None:
    """koord-manager refuses whichever comes second; we, seeing them all, refuse the later
    (oldest first, then by name), each parent's children after it: the same objects always give the same tree."""
    objects = [eq("p", min_={"cpu": "10"}, max_=CM, is_parent="true"),
               eq("b", min_={"cpu": "6"}, max_=CM, parent="p", namespaces=["x"]),
               eq("a", min_={"cpu": "6"}, max_=CM, parent="p"),
               eq("c", max_=CM, namespaces=["x"])]
    expected = {"b": "the mins of the children of p would add up to 12 of cpu, more than its min (10)"}
    assert ours(objects) == expected
    assert ours(list(reversed(objects))) == expected  # and c keeps namespace x: b, refused, binds none


@pytest.mark.kube  # needs Go, as `make test-kube` does (`make test` is Go-free): never skipped there
def test_every_row_names_a_koordinator_test_that_exists() -> None:
    """The rows cite Koordinator's tests and functions, and they are in its source: the
    version e2e/koordinator/go.mod pins, from Go's module cache (downloaded if missing)."""
    build.go_version()  # Go missing: a BuildError that says so, not a skip
    source = build.module_source("koordinator", KOORDINATOR_MODULE) / "pkg/webhook/elasticquota"
    assert source.is_dir(), f"{source} is not in Koordinator's source any more"
    text = "\n".join(p.read_text() for p in source.glob("*.go"))
    for rule in RULES:
        function, _, case = rule.koordinator.partition("/")
        assert f") {function}(" in text or f"func {function}(" in text, rule.koordinator
        assert not case or f'"{case}"' in text, rule.koordinator
