"""Parse and validate a JobQueue's spec into frozen dataclasses.

The CRD schema (``crds/jobqueues.antre.dev.yaml``) rejects most bad input at admission; this
module repeats its defaults and checks because the operator also meets objects the API server did
not default (created before a CRD upgrade, or served by a test emulator), and because some checks
(a password inside a plain URL, environment names the operator owns) matter for safety.

Every error names the field, the value and what is allowed (KEDA's typed_config style):
``spec.autoscaling.maxReplicas: got 0; must be an integer >= 1``.
Neighbours: ``rendering.py`` turns a :class:`JobQueueSpec` into manifests, ``scaling.py`` takes
its :class:`ScalingPolicy`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

from antre import errors, keys, redis_urls, sentinel_urls

from antre_operator import schedules, settings

REDIS_SCHEMES: Final = ("redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster",
                         "rediss+cluster")
SERVICE_TYPES: Final = ("ClusterIP", "NodePort", "LoadBalancer")
PULL_POLICIES: Final = ("Always", "IfNotPresent", "Never")
# The worker refuses any other name, so admission and the operator use the worker's patterns.
_QUEUE_RE: Final = keys.QUEUE_NAME_PATTERN
_PREFIX_RE: Final = keys.PREFIX_PATTERN
_HANDLERS_RE: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(,[A-Za-z_][A-Za-z0-9_.]*)*$")
#: A Kubernetes object name (an RFC 1123 subdomain, as Secrets and ServiceAccounts have), at
#: most OBJECT_NAME_MAX characters. Every name in the spec must match it before the operator
#: reads the object or renders a reference: a name is a path segment of the API request, and
#: "../../kube-system/secrets/x" would otherwise name another namespace's Secret. The same
#: pattern is in crds/jobqueues.antre.dev.yaml (a test keeps them equal).
OBJECT_NAME_RE: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
OBJECT_NAME_MAX: Final = 253
#: Pod annotations that set a security profile (AppArmor, seccomp: ``container.apparmor.
#: security.beta.kubernetes.io/worker: unconfined`` lifts the profile the restricted Pod Security
#: Standard requires). The CRD refuses the same keys (no backslashes: it is a CEL string there).
REFUSED_POD_ANNOTATION_RE: Final = re.compile(
    r"^([^/]*[.])?security[.](alpha|beta)[.]kubernetes[.]io/")
#: A key of a Secret's data, as the API server allows them (and never a path).
SECRET_KEY_RE: Final = re.compile(r"^[-._a-zA-Z0-9]+$")
#: Environment variables the operator sets itself; a user value would silently fight ours.
RESERVED_ENV_PREFIXES: Final = ("ANTRE_",)
RESERVED_ENV_NAMES: Final = frozenset({"POD_NAME"})
#: An environment variable's name as the API server takes it: printable ASCII but '=' (since
#: Kubernetes 1.32, by default; an older one also refuses names outside [-._a-zA-Z][-._a-zA-Z0-9]*
#: and the refusal is reported as ApplyFailed, naming the entry). The CRD has the same pattern.
ENV_NAME_RE: Final = re.compile(r"^[ -<>-~]+$")
#: The fields of one spec.worker.env entry, as in a container's env.
ENV_FIELDS: Final = ("name", "value", "valueFrom")
#: valueFrom's sources: each one's required fields, then its optional ones (as in a Pod; the
#: CRD has the same, a test keeps them equal).
ENV_SOURCES: Final[Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "secretKeyRef": (("name", "key"), ("optional",)),
    "configMapKeyRef": (("name", "key"), ("optional",)),
    "fieldRef": (("fieldPath",), ("apiVersion",)),
    "resourceFieldRef": (("resource",), ("containerName", "divisor")),
}


class InvalidSpec(ValueError):
    """The JobQueue cannot be acted on as written; retrying without an edit is useless."""

    reason = "InvalidSpec"
    """The reason of the condition and Event that report it."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}: got {value!r}; {allowed}")


@dataclasses.dataclass(frozen=True)
class SecretKeyRef:
    name: str
    key: str


@dataclasses.dataclass(frozen=True)
class RedisSpec:
    url: str | None
    """A plain URL without a password, or None when it comes from ``url_secret``."""
    url_secret: SecretKeyRef | None
    queue: str
    prefix: str
    tls: bool
    durable_replicas: int = 0
    """Replicas each enqueue, claim, renewal and ack waits for (ANTRE_DURABLE_REPLICAS)."""
    durable_timeout_s: float = 1.0


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    image: str
    image_pull_policy: str
    handlers: str | None
    concurrency: int
    visibility_timeout_s: int
    job_timeout_s: int | None
    """None: no limit on one attempt."""
    max_attempts: int
    backoff_base_s: float
    backoff_max_s: float
    termination_grace_period_s: int
    resources: Mapping[str, Any]
    env: Sequence[Mapping[str, Any]]
    node_selector: Mapping[str, str]
    tolerations: Sequence[Mapping[str, Any]]
    affinity: Mapping[str, Any]
    service_account_name: str | None
    image_pull_secrets: Sequence[str]
    pod_annotations: Mapping[str, str]

    @property
    def release_grace_s(self) -> int:
        """How long the worker lets running jobs finish on SIGTERM (ANTRE_GRACE_PERIOD).

        A few seconds below terminationGracePeriodSeconds, so the worker still has time to
        release unfinished jobs back to the queue before the kubelet's SIGKILL.
        """
        return max(self.termination_grace_period_s - settings.RELEASE_MARGIN_S, 1)


@dataclasses.dataclass(frozen=True)
class ScalingPolicy:
    """The autoscaler's knobs; see ``scaling.decide_replicas``."""

    enabled: bool
    min_replicas: int
    max_replicas: int
    target_backlog_per_replica: int
    activation_backlog: int
    polling_interval_s: float
    scale_down_stabilization_s: float
    cooldown_s: float
    max_scale_up_step: int | None
    """None: jump straight to the recommendation."""


@dataclasses.dataclass(frozen=True)
class ReaperSpec:
    schedule: str
    suspend: bool
    resources: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class ApiSpec:
    enabled: bool
    replicas: int
    service_type: str
    port: int
    token_secret: SecretKeyRef | None
    resources: Mapping[str, Any]
    dashboard: bool = False
    """spec.api.dashboard.enabled: the web dashboard under /ui, signed in with the API token."""
    dashboard_read_only: bool = False
    """spec.api.dashboard.readOnly: the dashboard shows everything and changes nothing."""
    dashboard_trusted_proxies: tuple[str, ...] = ()
    """spec.api.dashboard.trustedProxies: the reverse proxies whose X-Forwarded-For the
    sign-in throttle believes."""


@dataclasses.dataclass(frozen=True)
class JobQueueSpec:
    name: str
    namespace: str
    replicas: int
    """spec.replicas: the worker count when autoscaling is off (the /scale target)."""
    redis: RedisSpec
    worker: WorkerSpec
    autoscaling: ScalingPolicy
    reaper: ReaperSpec
    api: ApiSpec


# -- small typed readers: each names the field it reads ------------------------------------------

def _section(spec: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = spec.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidSpec(f"{path}.{key}", value, "must be an object")
    return value


def _given(section: Mapping[str, Any], key: str, default: Any) -> Any:
    """The field's value, or ``default`` when it is absent or null: the API server prunes an
    explicit null, but an object stored before a CRD upgrade may still carry one."""
    value = section.get(key)
    return default if value is None else value


def _int(section: Mapping[str, Any], key: str, path: str, *, default: int | None,
         minimum: int, maximum: int | None = None) -> int:
    value = _given(section, key, default)
    if value is None:
        raise InvalidSpec(f"{path}.{key}", value, "is required")
    bounds = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSpec(f"{path}.{key}", value, f"must be an integer {bounds}")
    if value < minimum or (maximum is not None and value > maximum):
        raise InvalidSpec(f"{path}.{key}", value, f"must be an integer {bounds}")
    return value


def _optional_int(section: Mapping[str, Any], key: str, path: str, *, minimum: int,
                  maximum: int | None = None) -> int | None:
    if section.get(key) is None:
        return None
    return _int(section, key, path, default=None, minimum=minimum, maximum=maximum)


def _number(section: Mapping[str, Any], key: str, path: str, *, default: float,
            minimum: float, maximum: float) -> float:
    value = _given(section, key, default)
    rule = f"must be a number between {minimum:g} and {maximum:g}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidSpec(f"{path}.{key}", value, rule)
    if not minimum <= value <= maximum:
        raise InvalidSpec(f"{path}.{key}", value, rule)
    return float(value)


def _bool(section: Mapping[str, Any], key: str, path: str, *, default: bool) -> bool:
    value = _given(section, key, default)
    if not isinstance(value, bool):
        raise InvalidSpec(f"{path}.{key}", value, "must be true or false")
    return value


def _str(section: Mapping[str, Any], key: str, path: str, *, default: str | None = None,
         pattern: re.Pattern[str] | None = None, choices: Sequence[str] = ()) -> str | None:
    value = _given(section, key, default)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidSpec(f"{path}.{key}", value, "must be a non-empty string")
    if choices and value not in choices:
        raise InvalidSpec(f"{path}.{key}", value, f"must be one of {list(choices)}")
    if pattern is not None and not pattern.fullmatch(value):
        raise InvalidSpec(f"{path}.{key}", value, f"must match {pattern.pattern}")
    return value


def _object_name(section: Mapping[str, Any], key: str, path: str, *, kind: str) -> str | None:
    """The name of a ``kind`` object in the JobQueue's namespace, or None when absent."""
    value = section.get(key)
    if value is None:
        return None
    if (not isinstance(value, str) or len(value) > OBJECT_NAME_MAX
            or not OBJECT_NAME_RE.fullmatch(value)):
        raise InvalidSpec(f"{path}.{key}", value,
                          f"must be the name of a {kind} in the JobQueue's namespace: lower case "
                          f"letters, digits, '-' and '.', at most {OBJECT_NAME_MAX} characters "
                          f"(e.g. redis-url)")
    return value


def _mapping(section: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = section.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidSpec(f"{path}.{key}", value, "must be an object")
    return dict(value)


def _string_map(section: Mapping[str, Any], key: str, path: str) -> Mapping[str, str]:
    value = _mapping(section, key, path)
    for k, v in value.items():
        if not isinstance(v, str):
            raise InvalidSpec(f"{path}.{key}.{k}", v, "must be a string")
    return value


def _list_of_objects(section: Mapping[str, Any], key: str, path: str) -> list[Mapping[str, Any]]:
    value = section.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidSpec(f"{path}.{key}", value, "must be a list")
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise InvalidSpec(f"{path}.{key}[{index}]", item, "must be an object")
    return [dict(item) for item in value]


def _secret_ref(section: Mapping[str, Any], key: str, path: str, *,
                default_key: str) -> SecretKeyRef | None:
    ref = section.get(key)
    if ref is None:
        return None
    if not isinstance(ref, Mapping):
        raise InvalidSpec(f"{path}.{key}", ref, "must be an object {name, key}")
    name = _object_name(ref, "name", f"{path}.{key}", kind="Secret")
    if name is None:
        raise InvalidSpec(f"{path}.{key}.name", None, "is required: the Secret's name")
    secret_key = _str(ref, "key", f"{path}.{key}", default=default_key, pattern=SECRET_KEY_RE)
    assert secret_key is not None
    return SecretKeyRef(name=name, key=secret_key)


# -- the sections ---------------------------------------------------------------------------------

REDACTED: Final = "<redacted>"
#: Query parameters credentials are taken from (redis-py's, and the Sentinels' own); never
#: allowed in a plain spec.redis.url.
#: ``ssl_password`` is the passphrase of the TLS client key.
SECRET_QUERY_PARAMETERS: Final = frozenset({"password", "username", "sentinel_password",
                                            "sentinel_username", "ssl_password"})


def check_redis_url(url: str, *, field: str, tls: bool) -> None:
    """Refuse a URL the workers could not use. The error never holds the URL: a URL that does
    not parse may still contain a password (e.g. an unescaped '/' in it)."""
    if "://" not in url:
        raise InvalidSpec(field, REDACTED,
                          f"must be a URL with a scheme in {list(REDIS_SCHEMES)}")
    scheme = url.split("://", 1)[0].lower()
    if scheme not in REDIS_SCHEMES:
        raise InvalidSpec(field, REDACTED, f"scheme must be one of {list(REDIS_SCHEMES)}")
    if tls and not scheme.startswith("rediss"):
        raise InvalidSpec(field, REDACTED,
                          "spec.redis.tls is true, so the scheme must be rediss://")
    if sentinel_urls.is_sentinel_url(url):
        try:  # its messages never hold a password or a host
            sentinel_urls.parse_url(url)
        except errors.InvalidArgument as exc:
            raise InvalidSpec(field, REDACTED, f"must be a valid Sentinel URL: {exc}") from None
        return
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises on a non-numeric port
    except ValueError:
        raise InvalidSpec(field, REDACTED,
                          "must be a parsable URL (host, then an optional numeric port; "
                          "a password must be percent-encoded)") from None
    if "@" in parts.path + parts.query + parts.fragment:
        # An unescaped '/', '?' or '#' in a password ends the host part early: the client would
        # connect to a "host" that is part of the password, and a message naming it would show it.
        raise InvalidSpec(field, REDACTED,
                          "must be a parsable URL: '@' after the host (write it %40 in the "
                          "path or the options; a password holding '/', '?', '#' or '@' must be "
                          "percent-encoded)")
    if not parts.hostname:
        raise InvalidSpec(field, REDACTED, "must name a host, e.g. redis://redis:6379/0")
    try:  # its messages never show a password or a value that may hold one
        redis_urls.check_url(url)
    except errors.InvalidArgument as exc:
        raise InvalidSpec(field, REDACTED, str(exc).removeprefix("redis url: ")) from None


def check_plain_url(url: str, *, field: str) -> None:
    """A URL written into the spec (and so into pod env values) must carry no credentials:
    no user info at all (an '@' anywhere) and no password/username query parameter."""
    advice = "put the URL in a Secret and use spec.redis.urlSecretRef"
    if "@" in url:
        raise InvalidSpec(field, REDACTED,
                          f"must not contain a password or user info ('@'); {advice}")
    query = url.split("?", 1)[1].split("#", 1)[0] if "?" in url else ""
    names = {name.lower() for name, _ in parse_qsl(query, keep_blank_values=True)}
    if names & SECRET_QUERY_PARAMETERS:
        raise InvalidSpec(field, REDACTED,
                          f"must not contain a password or username query parameter; {advice}")


def _parse_redis(spec: Mapping[str, Any], name: str) -> RedisSpec:
    path = "spec.redis"
    section = spec.get("redis")
    if not isinstance(section, Mapping):
        raise InvalidSpec(path, section, "is required: give url or urlSecretRef")
    tls = _bool(section, "tls", path, default=False)
    url = _str(section, "url", path)
    url_secret = _secret_ref(section, "urlSecretRef", path, default_key="url")
    if (url is None) == (url_secret is None):
        given = sorted(key for key in ("url", "urlSecretRef") if section.get(key) is not None)
        raise InvalidSpec(path, given, "give exactly one of url and urlSecretRef")  # never the URL
    if url is not None:
        check_plain_url(url, field=f"{path}.url")
        check_redis_url(url, field=f"{path}.url", tls=tls)
    queue = _str(section, "queue", path, default=name, pattern=_QUEUE_RE)
    prefix = _str(section, "prefix", path, default="antre", pattern=_PREFIX_RE)
    assert queue is not None and prefix is not None
    durable_replicas = _int(section, "durableReplicas", path, default=0, minimum=0, maximum=100)
    durable_timeout_s = _number(section, "durableTimeoutSeconds", path, default=1, minimum=0.001,
                                maximum=60)
    if durable_replicas and url is not None and "+cluster://" in url.lower():
        raise InvalidSpec(f"{path}.durableReplicas", durable_replicas,
                          "must be 0 with a Redis Cluster URL (durable writes need one primary "
                          "per queue: redis://, rediss:// or redis+sentinel://)")
    return RedisSpec(url=url, url_secret=url_secret, queue=queue, prefix=prefix, tls=tls,
                     durable_replicas=durable_replicas, durable_timeout_s=durable_timeout_s)


def _parse_env(section: Mapping[str, Any], path: str) -> list[Mapping[str, Any]]:
    """spec.worker.env: entries of a container's env, checked as the API server checks them
    (the worker Deployment counts the operator's own entries first, so its refusal would name
    another index) and refused where they name what the operator sets."""
    env = _list_of_objects(section, "env", path)
    for index, item in enumerate(env):
        _check_env_entry(item, f"{path}.env[{index}]")
    return env


def _check_env_entry(item: Mapping[str, Any], path: str) -> None:
    unknown = sorted(str(key) for key in item if key not in ENV_FIELDS)
    if unknown:  # names only: a value may be a secret
        raise InvalidSpec(path, unknown, "an env entry takes only name, value and valueFrom")
    env_name = item.get("name")
    if not isinstance(env_name, str) or not ENV_NAME_RE.fullmatch(env_name):
        raise InvalidSpec(f"{path}.name", env_name,
                          "must be a non-empty string of printable ASCII characters but '='")
    if env_name in RESERVED_ENV_NAMES or env_name.startswith(RESERVED_ENV_PREFIXES):
        raise InvalidSpec(f"{path}.name", env_name,
                          "is set by the operator from the JobQueue spec; use the spec field "
                          "instead (names starting with ANTRE_ and POD_NAME are reserved)")
    given = [key for key in ("value", "valueFrom") if item.get(key) is not None]
    if len(given) > 1:
        raise InvalidSpec(path, given, "give one of value and valueFrom, not both")
    if not given:  # a Pod takes a name alone as an empty variable, and so do JobQueues stored so
        return
    if "value" in given:
        if not isinstance(item["value"], str):
            raise InvalidSpec(f"{path}.value", item["value"],
                              'must be a string (quote numbers and booleans: "8080", "true")')
        return
    _check_env_source(item["valueFrom"], f"{path}.valueFrom")


def _check_env_source(value_from: Any, path: str) -> None:
    sources = list(ENV_SOURCES)
    if not isinstance(value_from, Mapping):
        raise InvalidSpec(path, value_from, f"must be an object with one of {sources}")
    given = [str(key) for key in value_from if value_from[key] is not None]
    if len(given) != 1 or given[0] not in ENV_SOURCES:
        raise InvalidSpec(path, given, f"give exactly one of {sources}")
    [source] = given
    ref, where = value_from[source], f"{path}.{source}"
    required, optional = ENV_SOURCES[source]
    if not isinstance(ref, Mapping):
        raise InvalidSpec(where, ref, f"must be an object {{{', '.join(required + optional)}}}")
    unknown = sorted(str(key) for key in ref if key not in required + optional)
    if unknown:
        raise InvalidSpec(where, unknown, f"takes only {', '.join(required + optional)}")
    for key in required:
        if ref.get(key) is None:
            raise InvalidSpec(f"{where}.{key}", None,
                              f"is required: {source} needs {' and '.join(required)}")
    if source in ("secretKeyRef", "configMapKeyRef"):
        kind = "Secret" if source == "secretKeyRef" else "ConfigMap"
        _object_name(ref, "name", where, kind=kind)
        _str(ref, "key", where, pattern=SECRET_KEY_RE)
        if len(ref["key"]) > OBJECT_NAME_MAX:
            raise InvalidSpec(f"{where}.key", ref["key"],
                              f"must be at most {OBJECT_NAME_MAX} characters")
        _bool(ref, "optional", where, default=False)
    elif source == "fieldRef":
        _str(ref, "fieldPath", where)
        _str(ref, "apiVersion", where)
    elif source == "resourceFieldRef":
        _str(ref, "resource", where)
        if not isinstance(ref.get("containerName", ""), str):
            raise InvalidSpec(f"{where}.containerName", ref["containerName"], "must be a string")
        divisor = ref.get("divisor")
        if divisor is not None and (isinstance(divisor, bool) or not isinstance(divisor, int | str)
                                    or divisor == ""):
            raise InvalidSpec(f"{where}.divisor", divisor,
                              "must be a quantity: an integer or a string such as 1m or 1Mi")


def _parse_worker(spec: Mapping[str, Any]) -> WorkerSpec:
    path = "spec.worker"
    section = _section(spec, "worker", "spec")
    backoff = _section(section, "backoff", path)
    base_s = _number(backoff, "baseSeconds", f"{path}.backoff", default=1, minimum=0, maximum=86400)
    if base_s <= 0:  # the worker refuses 0 (a crash loop): retries need a positive base
        raise InvalidSpec(f"{path}.backoff.baseSeconds", base_s,
                          "must be a number > 0 and <= 86400")
    max_s = _number(backoff, "maxSeconds", f"{path}.backoff", default=300, minimum=0,
                    maximum=604800)
    if base_s > max_s:
        raise InvalidSpec(f"{path}.backoff.baseSeconds", base_s,
                          f"must be <= spec.worker.backoff.maxSeconds ({max_s:g})")
    pull_secrets = _list_of_objects(section, "imagePullSecrets", path)
    for index, item in enumerate(pull_secrets):
        if _object_name(item, "name", f"{path}.imagePullSecrets[{index}]", kind="Secret") is None:
            raise InvalidSpec(f"{path}.imagePullSecrets[{index}].name", None,
                              "is required: the Secret's name")
    image = _str(section, "image", path, default=settings.DEFAULT_WORKER_IMAGE)
    pull_policy = _str(section, "imagePullPolicy", path, default="IfNotPresent",
                       choices=PULL_POLICIES)
    assert image is not None and pull_policy is not None
    return WorkerSpec(
        image=image,
        image_pull_policy=pull_policy,
        handlers=_str(section, "handlers", path, pattern=_HANDLERS_RE),
        concurrency=_int(section, "concurrency", path, default=4, minimum=1, maximum=1000),
        visibility_timeout_s=_int(section, "visibilityTimeoutSeconds", path, default=60,
                                  minimum=1, maximum=86400),
        job_timeout_s=_optional_int(section, "jobTimeoutSeconds", path, minimum=1,
                                    maximum=604800),
        max_attempts=_int(section, "maxAttempts", path, default=5, minimum=1, maximum=1000),
        backoff_base_s=base_s,
        backoff_max_s=max_s,
        termination_grace_period_s=_int(section, "terminationGracePeriodSeconds", path,
                                        default=120, minimum=10, maximum=86400),
        resources=_mapping(section, "resources", path) or settings.DEFAULT_WORKER_RESOURCES,
        env=_parse_env(section, path),
        node_selector=_string_map(section, "nodeSelector", path),
        tolerations=_list_of_objects(section, "tolerations", path),
        affinity=_mapping(section, "affinity", path),
        service_account_name=_object_name(section, "serviceAccountName", path,
                                          kind="ServiceAccount"),
        image_pull_secrets=[str(item["name"]) for item in pull_secrets],
        pod_annotations=_pod_annotations(section, path),
    )


def _pod_annotations(section: Mapping[str, Any], path: str) -> Mapping[str, str]:
    annotations = _string_map(section, "podAnnotations", path)
    for key in annotations:
        if REFUSED_POD_ANNOTATION_RE.match(key):
            raise InvalidSpec(f"{path}.podAnnotations", key,
                              "must not set an AppArmor or seccomp profile (security.alpha/beta."
                              "kubernetes.io annotations): every pod runs with the profile of "
                              "the restricted Pod Security Standard")
    return annotations


def _parse_autoscaling(spec: Mapping[str, Any]) -> ScalingPolicy:
    path = "spec.autoscaling"
    section = _section(spec, "autoscaling", "spec")
    enabled = _bool(section, "enabled", path, default=True)
    min_replicas = _int(section, "minReplicas", path, default=0, minimum=0, maximum=1000)
    max_replicas = _int(section, "maxReplicas", path, default=10, minimum=1, maximum=1000)
    if enabled and min_replicas > max_replicas:
        raise InvalidSpec(f"{path}.maxReplicas", max_replicas,
                          f"must be an integer >= spec.autoscaling.minReplicas ({min_replicas})")
    return ScalingPolicy(
        enabled=enabled,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        target_backlog_per_replica=_int(section, "targetBacklogPerReplica", path, default=100,
                                        minimum=1),
        activation_backlog=_int(section, "activationBacklog", path, default=0, minimum=0),
        polling_interval_s=_int(section, "pollingIntervalSeconds", path, default=5, minimum=1,
                                maximum=3600),
        scale_down_stabilization_s=_int(section, "scaleDownStabilizationSeconds", path,
                                        default=60, minimum=0, maximum=86400),
        cooldown_s=_int(section, "cooldownSeconds", path, default=300, minimum=0, maximum=86400),
        max_scale_up_step=_optional_int(section, "maxScaleUpStep", path, minimum=1, maximum=1000),
    )


def check_schedule(schedule: str, field: str) -> None:
    """Refuse a schedule the CronJob API would refuse, naming the field of the schedule."""
    problem = schedules.schedule_problem(schedule)
    if problem is not None:
        raise InvalidSpec(field, schedule, problem)


def _parse_reaper(spec: Mapping[str, Any]) -> ReaperSpec:
    path = "spec.reaper"
    section = _section(spec, "reaper", "spec")
    schedule = _str(section, "schedule", path, default="* * * * *")
    assert schedule is not None
    check_schedule(schedule, f"{path}.schedule")
    return ReaperSpec(
        schedule=schedule,
        suspend=_bool(section, "suspend", path, default=False),
        resources=_mapping(section, "resources", path) or settings.DEFAULT_REAPER_RESOURCES,
    )


def _parse_api(spec: Mapping[str, Any]) -> ApiSpec:
    path = "spec.api"
    section = _section(spec, "api", "spec")
    enabled = _bool(section, "enabled", path, default=False)
    token_secret = _secret_ref(section, "tokenSecretRef", path, default_key="token")
    if enabled and token_secret is None:
        raise InvalidSpec(f"{path}.tokenSecretRef", None,
                          "is required when spec.api.enabled is true: the API never runs "
                          "without a bearer token")
    service_type = _str(section, "serviceType", path, default="ClusterIP", choices=SERVICE_TYPES)
    assert service_type is not None
    dashboard = _section(section, "dashboard", path)
    return ApiSpec(
        enabled=enabled,
        replicas=_int(section, "replicas", path, default=1, minimum=1, maximum=100),
        service_type=service_type,
        port=_int(section, "port", path, default=80, minimum=1, maximum=65535),
        token_secret=token_secret,
        resources=_mapping(section, "resources", path) or settings.DEFAULT_API_RESOURCES,
        dashboard=_bool(dashboard, "enabled", f"{path}.dashboard", default=False),
        dashboard_read_only=_bool(dashboard, "readOnly", f"{path}.dashboard", default=False),
        dashboard_trusted_proxies=_networks(dashboard, "trustedProxies", f"{path}.dashboard"),
    )


def _networks(section: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
    """A list of IP addresses or CIDR ranges, each as ``ipaddress`` writes it."""
    value = section.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidSpec(f"{path}.{key}", value, "must be a list")
    networks = []
    for index, item in enumerate(value):
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except (TypeError, ValueError):
            raise InvalidSpec(f"{path}.{key}[{index}]", item,
                              "must be an IP address or a CIDR range (10.0.0.0/8)") from None
    return tuple(networks)


def parse_jobqueue(*, name: str, namespace: str, spec: Mapping[str, Any]) -> JobQueueSpec:
    """Parse a JobQueue's ``spec``; raises :class:`InvalidSpec` naming the first bad field."""
    if not isinstance(spec, Mapping):
        raise InvalidSpec("spec", spec, "must be an object")
    return JobQueueSpec(
        name=name,
        namespace=namespace,
        replicas=_int(spec, "replicas", "spec", default=1, minimum=0, maximum=1000),
        redis=_parse_redis(spec, name),
        worker=_parse_worker(spec),
        autoscaling=_parse_autoscaling(spec),
        reaper=_parse_reaper(spec),
        api=_parse_api(spec),
    )
