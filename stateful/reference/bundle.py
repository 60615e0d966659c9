"""Agent bundles (CONTRACT §2.1, §3): a gzip tar holding one ``<name>.yaml`` agent spec.

Unpacking is bounded and strict so that every malformed upload is answered with one clear message
(:class:`BundleError`) instead of an exception deep in ``tarfile`` or ``yaml``, and so that a small
archive cannot expand into a huge one.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import zlib

import yaml

from stateful.reference.spec import AgentSpec, SpecError, parse_agent_spec

MAX_UNPACKED_BYTES = 8 * 1024 * 1024
MAX_MEMBERS = 64
SPEC_SUFFIXES = (".yaml", ".yml")


class BundleError(ValueError):
    """A bundle that cannot be registered; the message says what is wrong with it."""


def _gunzip(data: bytes) -> bytes:
    if not data.startswith(b"\x1f\x8b"):
        raise BundleError("bundle is not gzip data (expected a .tar.gz)")
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            unpacked = stream.read(MAX_UNPACKED_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise BundleError(f"bundle is not valid gzip data: {exc}") from None
    if len(unpacked) > MAX_UNPACKED_BYTES:
        raise BundleError(f"bundle unpacks to more than {MAX_UNPACKED_BYTES} bytes")
    return unpacked


def read_spec_text(data: bytes) -> tuple[str, str]:
    """The one spec file of a bundle: ``(member name, text)``."""
    raw = _gunzip(data)
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as archive:
            members = []
            for count, member in enumerate(archive, start=1):
                if count > MAX_MEMBERS:
                    raise BundleError(f"bundle holds more than {MAX_MEMBERS} entries")
                members.append(member)
            specs = [
                m for m in members if m.isfile() and m.name.lower().endswith(SPEC_SUFFIXES)
            ]
            if len(specs) != 1:
                names = sorted(m.name for m in members)
                raise BundleError(
                    f"bundle must hold exactly one <name>.yaml agent spec; it holds {names}"
                )
            handle = archive.extractfile(specs[0])
            if handle is None:  # pragma: no cover - isfile() members always extract
                raise BundleError(f"cannot read {specs[0].name!r} from the bundle")
            content = handle.read()
            name = specs[0].name
    except tarfile.TarError as exc:
        raise BundleError(f"bundle is not a valid tar archive: {exc}") from None
    try:
        return name, content.decode("utf-8")
    except UnicodeDecodeError:
        raise BundleError(f"{name!r} is not UTF-8 text") from None


def parse_bundle(data: bytes) -> AgentSpec:
    """Unpack, load and parse a bundle into an :class:`AgentSpec` (or raise :class:`BundleError`)."""
    name, text = read_spec_text(data)
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BundleError(f"{name!r} is not valid YAML: {exc}") from None
    except RecursionError:
        raise BundleError(f"{name!r} is nested too deeply") from None
    try:
        return parse_agent_spec(document)
    except SpecError as exc:
        raise BundleError(f"invalid agent spec in {name!r}: {exc}") from None


def build_bundle(name: str, spec_yaml: str) -> bytes:
    """A bundle holding ``<name>.yaml`` (used by the e2e helpers and the tests)."""
    payload = spec_yaml.encode("utf-8")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo(f"{name}.yaml")
        info.size = len(payload)
        info.mode = 0o644
        archive.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()
