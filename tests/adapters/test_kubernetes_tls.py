"""The drain reaches an EKS API endpoint over HTTPS, trusting only the cluster's own certificate authority (the
``certificateAuthority.data`` DescribeCluster returns), through the Kubernetes client library the function ships.

The loopback API server (``governor_cli.testing.kubeapi``) serves TLS with a certificate signed by a CA made here, as
EKS's endpoint does with the cluster's CA: with that CA's data the drain goes through; with another cluster's CA the
TLS handshake fails, the governor reports a Kubernetes error and the server has received no request at all.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from governor.idle.kubernetes.api import KubernetesApi, KubernetesError
from governor.idle.kubernetes.reclaim import reclaim_node
from tests.adapters.test_kubernetes_reclaim import INSTANCE, NODE, _karpenter_cluster

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _authority(common: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(_name(common))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=1))
        .not_valid_after(NOW + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _server_context(folder: Path, ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate]) -> ssl.SSLContext:
    """The API server's TLS: a certificate for 127.0.0.1 signed by the cluster's CA (what EKS serves)."""
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-apiserver"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=1))
        .not_valid_after(NOW + dt.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    (folder / "server.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "server.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "server.pem", folder / "server.key")
    return context


def _ca_data(cert: x509.Certificate) -> str:
    """As DescribeCluster returns it: ``cluster.certificateAuthority.data``, the CA's PEM in base64."""
    return base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode()


@pytest.fixture
def cluster_ca(tmp_path: Path) -> Iterator[tuple[object, str, str]]:
    ca = _authority("kubernetes")
    server = _karpenter_cluster()
    url = server.start(tls=_server_context(tmp_path, ca))
    yield server, url, _ca_data(ca[1])
    server.stop()


def test_the_drain_goes_over_tls_trusting_the_cluster_s_own_ca(cluster_ca: tuple[object, str, str]) -> None:
    server, url, ca_data = cluster_ca
    assert url.startswith("https://127.0.0.1:")
    api = KubernetesApi(url, lambda: "k8s-aws-v1.test", ca_data=ca_data)
    done = reclaim_node(api, NODE, INSTANCE, enforce=True)
    assert done.owner == "karpenter" and done.removed and done.evicted == ["research/notebook-0"]
    assert server.node["spec"]["unschedulable"] is True and server.claims == []  # type: ignore[attr-defined]


def test_another_cluster_s_ca_is_refused_before_any_request(cluster_ca: tuple[object, str, str]) -> None:
    server, url, _ = cluster_ca
    _, other = _authority("another-cluster")
    api = KubernetesApi(url, lambda: "k8s-aws-v1.test", ca_data=_ca_data(other))
    with pytest.raises(KubernetesError, match=r"(?i)certificate|ssl|tls"):
        reclaim_node(api, NODE, INSTANCE, enforce=True)
    assert server.calls == [] and server.node["spec"].get("unschedulable") is not True  # type: ignore[attr-defined]
