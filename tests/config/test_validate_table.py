"""Table of valid and invalid queues.yaml configs with the exact message expected (YuniKorn 1.3 checks)."""

import textwrap

import pytest

from common.config import ConfigError, load_config


def part(body: str, name: str = "default") -> str:
    """A config with one partition; ``body`` is the partition's keys (indented by the helper)."""
    return "partitions:\n  - name: " + name + "\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"


def queues(body: str) -> str:
    """A partition whose root has the children in ``body``."""
    return part("queues:\n  - name: root\n    submitacl: '*'\n    queues:\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "      "))


def rules(body: str) -> str:
    return part("queues:\n  - name: root\n    submitacl: '*'\nplacementrules:\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "  "))


P = "partition default"

VALID = [
    ("minimal root", part("queues:\n  - name: root")),
    ("root inserted above several top queues", part("queues:\n  - name: a\n  - name: b")),
    ("names with digits dash underscore", queues("- name: Team_1-a")),
    ("64 character name", queues("- name: " + "a" * 64)),
    ("memory suffixes and vcore milli", queues("- name: a\n  resources:\n    guaranteed: {memory: 1Gi, vcore: 500m}\n    max: {memory: 2G, vcore: 1}")),
    ("guaranteed equal max", queues("- name: a\n  resources:\n    guaranteed: {memory: 10}\n    max: {memory: 10}")),
    ("guaranteed of a type without max", queues("- name: a\n  resources:\n    guaranteed: {gpu: 3}\n    max: {memory: 10}")),
    ("children guaranteed within parent", queues("""
        - name: p
          resources: {guaranteed: {memory: 10}, max: {memory: 20}}
          queues:
            - {name: c1, resources: {guaranteed: {memory: 5}}}
            - {name: c2, resources: {guaranteed: {memory: 5}}}
        """)),
    ("parent without guaranteed passes the sum up", queues("""
        - name: p
          resources: {guaranteed: {memory: 10}}
          queues:
            - name: mid
              queues:
                - {name: c1, resources: {guaranteed: {memory: 4}}}
                - {name: c2, resources: {guaranteed: {memory: 6}}}
        """)),
    ("maxapplications child within parent", queues("- name: p\n  maxapplications: 10\n  queues:\n    - {name: c, maxapplications: 10}")),
    ("acl users and groups", queues("- name: a\n  submitacl: 'u1,u2 g1,g2'\n  adminacl: ' admins'")),
    ("all four rules", rules("- {name: provided, create: true}\n- {name: User}\n- {name: fixed, value: a.b}\n- {name: TAG, value: namespace}")),
    ("parent as one-element list", rules("- name: user\n  parent:\n    - {name: fixed, value: users}")),
    ("filter with regexp", rules("- name: user\n  filter: {type: deny, users: ['^adm.*'], groups: [g1, g2]}")),
    ("limits", part("queues:\n  - name: root\nlimits:\n  - {limit: l, users: ['*'], maxapplications: 3}\n  - {groups: [dev], maxresources: {memory: 1G}}")),
    ("node sort binpacking with weights", part("queues:\n  - name: root\nnodesortpolicy:\n  type: binpacking\n  resourceweights: {vcore: 2.5, memory: 0}")),
    ("preemption enabled", part("queues:\n  - name: root\npreemption: {enabled: true}")),
    ("checksum line ignored", "checksum: ABC\n" + part("queues:\n  - name: root")),
    ("two partitions", part("queues:\n  - name: root") + "  - name: gpu\n    queues:\n      - name: root\n"),
    ("child template", queues("- name: p\n  parent: true\n  childtemplate:\n    maxapplications: 5\n    properties: {application.sort.policy: fair}\n    resources: {max: {memory: 1G}}")),
    ("empty values are defaults", part("queues:\n  - name: root\n    submitacl:\n    properties:\nplacementrules:\nlimits:")),
]

INVALID = [
    # id, config, expected message (exact, one of the errors)
    ("duplicate partition", part("queues:\n  - name: root") + "  - name: DEFAULT\n    queues:\n      - name: root\n",
     f"{P}: duplicate partition name found with name default"),
    ("no queues", part("placementrules: []"), f"{P}: queue config is not set"),
    ("root with max", part("queues:\n  - name: root\n    resources: {max: {memory: 10}}"),
     f"{P}, queue root: root queue must not have resource limits set"),
    ("root with guaranteed", part("queues:\n  - name: Root\n    resources: {guaranteed: {vcore: 1}}"),
     f"{P}, queue root: root queue must not have resource limits set"),
    ("name with dot", queues("- name: a.b"),
     f"{P}, queue root.a.b: invalid child name a.b, a name must only have alphanumeric characters, - or _, and be no longer than 64 characters"),
    ("name too long", queues("- name: " + "a" * 65),
     f"{P}, queue root.{'a' * 65}: invalid child name {'a' * 65}, a name must only have alphanumeric characters, - or _, and be no longer than 64 characters"),
    ("unicode queue name", queues("- name: équipe"),
     f"{P}, queue root.équipe: invalid child name équipe, a name must only have alphanumeric characters, - or _, and be no longer than 64 characters"),
    ("duplicate child case-insensitive", queues("- name: Team\n- name: team"),
     f"{P}, queue root.team: duplicate child name found with name team, level 1"),
    ("guaranteed above max", queues("- name: a\n  resources:\n    guaranteed: {memory: 20}\n    max: {memory: 10}"),
     f"{P}, queue root.a: guaranteed resource map[memory:20] is larger than maximum resource map[memory:10] for queue root.a"),
    ("child guarantees a type the parent does not", queues("- name: p\n  resources: {guaranteed: {memory: 5}}\n  queues:\n    - {name: c, resources: {guaranteed: {vcore: 1}}}"),
     f"{P}, queue root.p: guaranteed resource of parent map[memory:5] is smaller than sum of guaranteed resources map[vcore:1000] of the children for queue root.p"),
    ("child max above parent max", queues("- name: p\n  resources: {max: {vcore: 2}}\n  queues:\n    - {name: c, resources: {max: {vcore: 3}}}"),
     f"{P}, queue root.p.c: max resource of parent map[vcore:2000] is smaller than maximum resource map[vcore:3000] for queue root.p.c"),
    ("grandchild max above inherited max", queues("- name: p\n  resources: {max: {memory: 5}}\n  queues:\n    - name: m\n      queues:\n        - {name: c, resources: {max: {memory: 6}}}"),
     f"{P}, queue root.p.m.c: max resource of parent map[memory:5] is smaller than maximum resource map[memory:6] for queue root.p.m.c"),
    ("children guaranteed above parent guaranteed", queues("- name: p\n  resources: {guaranteed: {memory: 5}}\n  queues:\n    - {name: c1, resources: {guaranteed: {memory: 3}}}\n    - {name: c2, resources: {guaranteed: {memory: 3}}}"),
     f"{P}, queue root.p: guaranteed resource of parent map[memory:5] is smaller than sum of guaranteed resources map[memory:6] of the children for queue root.p"),
    ("children guaranteed above parent max", queues("- name: p\n  resources: {max: {memory: 5}}\n  queues:\n    - {name: c1, resources: {guaranteed: {memory: 3}}}\n    - {name: c2, resources: {guaranteed: {memory: 3}}}"),
     f"{P}, queue root.p: max resource map[memory:5] is smaller than sum of guaranteed resources map[memory:6] of the children for queue root.p"),
    ("child maxapplications above parent", queues("- name: p\n  maxapplications: 2\n  queues:\n    - {name: c, maxapplications: 3}"),
     f"{P}, queue root.p.c: parent maxRunningApps must be larger than child maxRunningApps (parent root.p: 2, child: 3)"),
    ("child maxapplications unlimited under limited parent", queues("- name: p\n  maxapplications: 2\n  queues:\n    - {name: c}"),
     f"{P}, queue root.p.c: parent maxRunningApps must be larger than child maxRunningApps (parent root.p: 2, child: unlimited)"),
    ("negative maxapplications", queues("- {name: a, maxapplications: -1}"),
     f"{P}, queue root.a: partitions[0].queues[0].queues[0].maxapplications must be a non-negative integer, got '-1'"),
    ("negative quantity", queues("- name: a\n  resources: {max: {memory: -1}}"),
     f"{P}, queue root.a: partitions[0].queues[0].queues[0].resources.max: resource memory: invalid quantity '-1'"),
    ("decimal quantity", queues("- name: a\n  resources: {max: {memory: 1.5G}}"),
     f"{P}, queue root.a: partitions[0].queues[0].queues[0].resources.max: resource memory: invalid quantity '1.5G'"),
    ("milli on memory", queues("- name: a\n  resources: {max: {memory: 100m}}"),
     f"{P}, queue root.a: partitions[0].queues[0].queues[0].resources.max: resource memory: invalid suffix 'm' in quantity '100m' (milli is only valid for vcore)"),
    ("unknown suffix", queues("- name: a\n  resources: {max: {memory: 1Xi}}"),
     f"{P}, queue root.a: partitions[0].queues[0].queues[0].resources.max: resource memory: invalid quantity '1Xi'"),
    ("quantity overflow", queues("- name: a\n  resources: {max: {memory: 9Ei}}"),
     f"{P}, queue root.a: partitions[0].queues[0].queues[0].resources.max: resource memory: invalid quantity: overflow '9Ei'"),
    ("acl with three fields", queues("- name: a\n  submitacl: 'u g x'"),
     f"{P}, queue root.a: submitacl: multiple spaces found in ACL: 'u g x'"),
    ("acl with double space", queues("- name: a\n  adminacl: 'u  g'"),
     f"{P}, queue root.a: adminacl: multiple spaces found in ACL: 'u  g'"),
    ("unknown queue key with hint", queues("- {name: a, maxApplications: 3}"),
     f"{P}, queue root.a: unknown key 'maxApplications' at partitions[0].queues[0].queues[0].maxApplications (keys are lower-case: did you mean 'maxapplications'?)"),
    ("unknown partition key", part("queues:\n  - name: root\nplacement: []"),
     f"{P}: unknown key 'placement' at partitions[0].placement (did you mean 'placementrules'?)"),
    ("unknown top key", "partitons: []\n",
     "config: unknown key 'partitons' (did you mean 'partitions'?)"),
    ("rule name not an identifier", rules("- name: user-rule"),
     f"{P}, placement rule 1 (user-rule): invalid rule name user-rule, a name must be a valid identifier"),
    ("unicode rule name", rules("- name: usér"),
     f"{P}, placement rule 1 (usér): invalid rule name usér, a name must be a valid identifier"),
    ("unknown rule name", rules("- name: primaryGroup"),
     f"{P}, placement rule 1 (primarygroup): unknown rule name specified primarygroup, failing placement rule config"),
    ("create not a boolean", rules("- {name: user, create: yes}"),
     f"{P}, placement rule 1 (user): partitions[0].placementrules[0].create must be true or false, got 'yes'"),
    ("parent list of two", rules("- name: user\n  parent:\n    - {name: fixed, value: a}\n    - {name: fixed, value: b}"),
     f"{P}, placement rule 1 (user): partitions[0].placementrules[0].parent must be one rule (a mapping or a list of exactly one rule), got a list of 2"),
    ("fixed without value", rules("- name: fixed"),
     f"{P}, placement rule 1 (fixed): a fixed queue rule must have a queue name set"),
    ("tag without value", rules("- name: tag"),
     f"{P}, placement rule 1 (tag): a tag queue rule must have a tag name set"),
    ("qualified fixed with parent", rules("- name: fixed\n  value: root.prod\n  parent: {name: user}"),
     f"{P}, placement rule 1 (fixed): cannot have a fixed queue rule with qualified queue name and a parent rule: root.prod"),
    ("fixed with invalid queue name", rules("- {name: fixed, value: 'a..b'}"),
     f"{P}, placement rule 1 (fixed): invalid queue name '' in fixed rule value 'a..b'"),
    ("nested parent error named", rules("- name: user\n  parent:\n    name: tag\n    parent: {name: fixed}"),
     f"{P}, placement rule 1 (user) parent (tag): a tag queue rule must have a tag name set"),
    ("filter type", rules("- name: user\n  filter: {type: maybe}"),
     f"{P}, placement rule 1 (user): invalid rule filter type maybe, filter type  must be either '', allow or deny"),
    ("filter single entry neither name nor regexp", rules("- name: user\n  filter: {users: ['1abc']}"),
     f"{P}, placement rule 1 (user): invalid rule filter user list is not a proper list or regexp: [1abc]"),
    ("filter regexp that does not compile", rules("- name: user\n  filter: {groups: ['[dev']}"),
     f"{P}, placement rule 1 (user): invalid rule filter group list is not a proper list or regexp: [[dev]"),
    ("filter regexp beside list entries", rules("- name: user\n  filter: {users: [alice, '^b.*']}"),
     f"{P}, placement rule 1 (user): invalid rule filter user list: '^b.*' is not a valid user name (a regular expression is only allowed as the single entry)"),
    ("limit without users and groups", part("queues:\n  - name: root\nlimits:\n  - {limit: mine, maxapplications: 1}"),
     f"{P}, limit 1: empty user and group lists defined in limit 'mine'"),
    ("limit invalid user", part("queues:\n  - name: root\nlimits:\n  - {users: ['a b'], maxapplications: 1}"),
     f"{P}, limit 1: invalid limit user name 'a b' in limit definition"),
    ("limit invalid group", queues("- name: a\n  limits:\n    - {groups: ['g.x'], maxapplications: 1}"),
     f"{P}, queue root.a, limit 1: invalid limit group name 'g.x' in limit definition"),
    ("limit all null", part("queues:\n  - name: root\nlimits:\n  - {users: [u1], groups: [g1], maxresources: {memory: 0}}"),
     f"{P}, limit 1: invalid resource combination for limit names 'u1,g1' all resource limits are null"),
    ("node sort policy unknown", part("queues:\n  - name: root\nnodesortpolicy: {type: Fair}"),
     f"{P}: nodesortpolicy: undefined policy: Fair"),
    ("node sort policy as scalar", part("queues:\n  - name: root\nnodesortpolicy: binpacking"),
     f"{P}: partitions[0].nodesortpolicy must be a mapping, e.g. 'nodesortpolicy: {{type: binpacking}}', got the string 'binpacking'"),
    ("negative weight", part("queues:\n  - name: root\nnodesortpolicy: {resourceweights: {vcore: -1}}"),
     f"{P}: nodesortpolicy: negative resource weight for vcore is not allowed"),
    ("preemption not boolean", part("queues:\n  - name: root\npreemption: {enabled: on}"),
     f"{P}: partitions[0].preemption.enabled must be true or false, got 'on'"),
    ("partition name with brackets", part("queues:\n  - name: root", name="'[rm]x'"),
     "partition [rm]x: invalid partition name '[rm]x', a name must only have alphanumeric characters, ., - or _, and be no longer than 64 characters"),
    ("queues not a list", part("queues: root"),
     f"{P}: partitions[0].queues must be a list, got the value 'root'"),
    ("queue without name", queues("- {maxapplications: 1}"),
     f"{P}, queue root.?: partitions[0].queues[0].queues[0].name is required and must be a string"),
    ("no partitions", "partitions: []\n", "config: no partitions defined"),
    ("document is a list", "- a\n- b\n", "config: must be a mapping, got a list"),
    ("null document", "~\n", "scheduler config is not set"),
    ("child template guaranteed above max", queues("- name: p\n  parent: true\n  childtemplate:\n    resources: {guaranteed: {memory: 2}, max: {memory: 1}}"),
     f"{P}, queue root.p: childtemplate: guaranteed resource map[memory:2] is larger than maximum resource map[memory:1]"),
]


@pytest.mark.parametrize("text", [c[1] for c in VALID], ids=[c[0] for c in VALID])
def test_valid_config(text):
    config = load_config(text)
    assert config.partitions and all(p.root.name == "root" for p in config.partitions)


@pytest.mark.parametrize("text,message", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_config(text, message):
    with pytest.raises(ConfigError) as err:
        load_config(text)
    assert message in err.value.errors, "\n".join(err.value.errors)


def test_table_is_big_enough():
    assert len(VALID) + len(INVALID) >= 40
