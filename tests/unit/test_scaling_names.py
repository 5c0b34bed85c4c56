"""Names the scaling role creates are valid DNS-1123 subdomains, deterministic, and do not
collide. The rule: k8s.io/apimachinery/pkg/util/validation `IsDNS1123Subdomain` (at most
253 characters, lowercase alphanumerics, `-` and `.`, starting and ending alphanumeric);
https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-subdomain-names
"""

from __future__ import annotations

import re

import pytest

from scheduler.names import event_name, is_subdomain, provisional_hpa_name, subdomain

# The upstream expression, written independently of the module's.
DNS1123_SUBDOMAIN = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", re.ASCII
)


def valid(name: str) -> bool:
    return len(name) <= 253 and DNS1123_SUBDOMAIN.fullmatch(name) is not None


LONG = "a" * 250
ENDS_WITH_DOT_WHEN_CUT = "b" * 244 + ".c" + "d" * 7  # cut at 245 leaves a trailing dot
ENDS_WITH_DASH_WHEN_CUT = "e" * 237 + "-fghij"


def test_a_short_deployment_name_is_the_hpa_name() -> None:
    assert provisional_hpa_name("web", set()) == "web"
    assert provisional_hpa_name("web", {"web"}) == "web-moonin"
    assert provisional_hpa_name("web", {"web", "web-moonin"}) == "web-moonin-2"


@pytest.mark.parametrize("deployment", [LONG, ENDS_WITH_DOT_WHEN_CUT, ENDS_WITH_DASH_WHEN_CUT])
def test_provisional_names_of_long_deployments_stay_valid_at_every_fallback(
    deployment: str,
) -> None:
    taken: set[str] = {deployment}
    for _ in range(4):
        name = provisional_hpa_name(deployment, taken)
        assert valid(name), name
        assert name not in taken
        taken.add(name)


def test_the_same_deployment_gets_the_same_name_and_long_look_alikes_do_not_collide() -> None:
    first, second = "x" * 252 + "1", "x" * 252 + "2"  # the same once cut
    assert provisional_hpa_name(first, {first}) == provisional_hpa_name(first, {first})
    assert provisional_hpa_name(first, {first}) != provisional_hpa_name(second, {second})


def test_event_names_of_long_objects_are_valid_and_keep_client_gos_form_when_short() -> None:
    assert event_name("web", 0x17F3A) == "web.17f3a"
    for involved in (LONG, ENDS_WITH_DOT_WHEN_CUT, ENDS_WITH_DASH_WHEN_CUT):
        name = event_name(involved, 1_780_000_000_000_000_000)
        assert valid(name), name
        assert name.endswith(f".{1_780_000_000_000_000_000:x}")


@pytest.mark.parametrize("base", ["Web_App", "a..b", "a.-b", "-a-", "", "ünïcode"])
def test_anything_given_becomes_a_valid_name(base: str) -> None:
    for suffix in ("", "-moonin", ".1a"):
        assert valid(subdomain(base, suffix)), (base, suffix)
    assert is_subdomain(subdomain(base)) and subdomain("Web_App") != subdomain("web-app")
