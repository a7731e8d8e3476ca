"""ssl.principal.mapping.rules as Kafka documents and tests them (SslPrincipalMapper)."""

from __future__ import annotations

import pytest

from strom.security.principal_mapping import (
    PrincipalMapper,
    PrincipalMappingError,
    distinguished_name,
    parse_rules,
)

# the example of Kafka's documentation (docs/security.html, "Customizing SSL User Name")
DOC_RULES = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
    "DEFAULT"
)


@pytest.mark.parametrize(
    ("dn", "name"),
    [
        ("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown", "serviceuser"),
        ("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown", "adminuser@admin"),
        ("CN=kafka1,O=Apache", "kafka1"),  # the third rule
        ("OU=nobody", "OU=nobody"),  # DEFAULT
    ],
)
def test_kafka_documentation_example(dn: str, name: str) -> None:
    assert PrincipalMapper.from_config(DOC_RULES).name(dn) == name


@pytest.mark.parametrize(
    ("rules", "dn", "name"),
    [
        # from Kafka's SslPrincipalMapperTest.testSslPrincipalMapper
        (
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),"
            "ST=(.*?),C=(.*?)$/$1@$2/L, RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, "
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT",
            "CN=Duke,OU=ServiceUsers,O=Org,C=US",
            "duke",
        ),
        (
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),"
            "ST=(.*?),C=(.*?)$/$1@$2/L, RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, "
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT",
            "CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US",
            "duke@sme",
        ),
        (
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),"
            "ST=(.*?),C=(.*?)$/$1@$2/L, RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, "
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT",
            "cn=duke,ou=sme,dc=mycp,dc=com",
            "DUKE@SME",
        ),
        (
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),"
            "ST=(.*?),C=(.*?)$/$1@$2/L, RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, "
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT",
            "cN=duke,OU=JavaSoft,O=Sun Microsystems",
            "DUKE",
        ),
        (
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),"
            "ST=(.*?),C=(.*?)$/$1@$2/L, RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, "
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT",
            "OU=JavaSoft,O=Sun Microsystems,C=US",
            "OU=JavaSoft,O=Sun Microsystems,C=US",
        ),
        # testRulesSplitting / escaped slashes (Kafka's testCommaWithWhitespace and friends)
        (
            "RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT",
            "CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz",
            "Tkac\\, Adam",
        ),
        ("RULE:^CN=(.*?)\\/(.*)$/$1\\/x/", "CN=a/b", "a/x"),
        # a group number above the pattern's groups: $12 with one group is $1 then "2"
        ("RULE:^CN=(.*)$/$12/", "CN=ab", "ab2"),
        ("RULE:^CN=(.*)$/$3/", "CN=ab", "$3"),
    ],
)
def test_kafka_mapper_cases(rules: str, dn: str, name: str) -> None:
    assert PrincipalMapper.from_config(rules).name(dn) == name


def test_default_when_unset_and_no_matching_rule_refused() -> None:
    assert PrincipalMapper.from_config(None).name("CN=x,O=y") == "CN=x,O=y"
    with pytest.raises(PrincipalMappingError, match="no ssl.principal.mapping.rules rule"):
        PrincipalMapper.from_config("RULE:^CN=(.*)$/$1/").name("OU=x")


@pytest.mark.parametrize(
    "rules",
    ["DEFAULTS", "RULE:/", "RULE:^CN=(.*)$/$1/LU", "RULE:^CN=(.*)$/$1/L/", "RULE:^CN=(.*$/$1/"],
)
def test_invalid_rules_refused(rules: str) -> None:
    # Kafka's testInvalidRules, and a pattern that does not compile
    with pytest.raises(PrincipalMappingError):
        parse_rules(rules)


def test_rules_split_on_commas_and_whitespace() -> None:
    assert len(parse_rules("  RULE:^CN=(.*)$/$1/L ,\n DEFAULT  ")) == 2
    assert parse_rules("") == ()


def test_distinguished_name_of_a_certificate() -> None:
    from strom.testing.tls import CertificateAuthority

    ca = CertificateAuthority()
    cert = ca.issue("CN=alice,OU=eng,O=Acme,C=US").certificate_der
    assert distinguished_name(cert) == "CN=alice,OU=eng,O=Acme,C=US"
