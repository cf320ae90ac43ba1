-- name: gpu_instance_hours
-- purpose: GPU instance-hours in the range, one row per creator and instance type (from RunInstances, StartInstances, StopInstances, TerminateInstances)
-- cis: none
-- parameters: :start, :end (ISO 8601 times; start inclusive, end exclusive)
--
-- Athena (Trino) SQL. An instance counts from its successful RunInstances (or a later StartInstances) until the next
-- StopInstances / TerminateInstances, or the end of the range; time outside the range is not counted. Instances
-- launched before the range are not seen (their type and creator are in RunInstances): the lifecycle ledger has
-- exact sessions. Day partitions run from the start's date to the day after the range's last second (the key date is
-- the delivery date); events are deduplicated on eventid.
-- Athena binds execution parameters only in WHERE clauses, so a session still running at the end of the range is
-- measured up to :end by counting whole hundreds of hours, then hours, then minutes, then seconds that fit before it
-- (each count bound in a WHERE): exact to the second, for sessions of up to 9,999 hours. Counting the hours in two
-- digits of 100 tries each session against 200 candidate times instead of 10,000 (issue 24: the single
-- sequence(0, 9999) made this query most of the audit's CPU).
WITH events AS (
  SELECT
    *,
    row_number() OVER (PARTITION BY eventid ORDER BY eventtime) AS occurrence
  FROM cloudtrail_logs
  WHERE day BETWEEN date_format(from_iso8601_timestamp(:start), '%Y/%m/%d')
                AND date_format(from_iso8601_timestamp(:end) - INTERVAL '1' SECOND + INTERVAL '1' DAY, '%Y/%m/%d')
    AND from_iso8601_timestamp(eventtime) >= from_iso8601_timestamp(:start)
    AND from_iso8601_timestamp(eventtime) < from_iso8601_timestamp(:end)
    AND eventsource = 'ec2.amazonaws.com'
    AND eventname IN ('RunInstances', 'StartInstances', 'StopInstances', 'TerminateInstances')
    AND errorcode IS NULL
),
launches AS (
  SELECT
    json_extract_scalar(item, '$.instanceId') AS instance_id,
    json_extract_scalar(item, '$.instanceType') AS instance_type,
    coalesce(e.useridentity.arn, e.useridentity.principalid, e.useridentity.type) AS creator,
    e.recipientaccountid AS account
  FROM events AS e
  CROSS JOIN UNNEST(CAST(json_extract(e.responseelements, '$.instancesSet.items') AS ARRAY(JSON))) AS launched (item)
  WHERE e.occurrence = 1
    AND e.eventname = 'RunInstances'
    AND regexp_like(coalesce(json_extract_scalar(item, '$.instanceType'), ''), '^(p|g|trn|inf|dl)[0-9]')
),
transitions AS (
  SELECT
    json_extract_scalar(item, '$.instanceId') AS instance_id,
    from_iso8601_timestamp(e.eventtime) AS at,
    CASE WHEN e.eventname IN ('RunInstances', 'StartInstances') THEN 1 ELSE 0 END AS running,
    e.eventid
  FROM events AS e
  CROSS JOIN UNNEST(CAST(json_extract(e.responseelements, '$.instancesSet.items') AS ARRAY(JSON))) AS changed (item)
  WHERE e.occurrence = 1
),
sessions AS (
  SELECT
    instance_id,
    running,
    at AS began,
    lead(at) OVER (PARTITION BY instance_id ORDER BY at, eventid) AS ended
  FROM transitions
),
open_centuries AS (
  SELECT s.instance_id, s.began, max(c.n) AS centuries
  FROM sessions AS s
  CROSS JOIN UNNEST(sequence(0, 99)) AS c (n)
  WHERE s.running = 1
    AND s.ended IS NULL
    AND s.began + c.n * 100 * INTERVAL '1' HOUR <= from_iso8601_timestamp(:end)
  GROUP BY s.instance_id, s.began
),
open_hours AS (
  SELECT o.instance_id, o.began, o.centuries * 100 + max(h.n) AS hours
  FROM open_centuries AS o
  CROSS JOIN UNNEST(sequence(0, 99)) AS h (n)
  WHERE o.began + (o.centuries * 100 + h.n) * INTERVAL '1' HOUR <= from_iso8601_timestamp(:end)
  GROUP BY o.instance_id, o.began, o.centuries
),
open_minutes AS (
  SELECT o.instance_id, o.began, o.hours, max(m.n) AS minutes
  FROM open_hours AS o
  CROSS JOIN UNNEST(sequence(0, 59)) AS m (n)
  WHERE o.began + o.hours * INTERVAL '1' HOUR + m.n * INTERVAL '1' MINUTE <= from_iso8601_timestamp(:end)
  GROUP BY o.instance_id, o.began, o.hours
),
open_seconds AS (
  SELECT o.instance_id, o.began, o.hours * 3600 + o.minutes * 60 + max(x.n) AS seconds
  FROM open_minutes AS o
  CROSS JOIN UNNEST(sequence(0, 59)) AS x (n)
  WHERE o.began + o.hours * INTERVAL '1' HOUR + o.minutes * INTERVAL '1' MINUTE + x.n * INTERVAL '1' SECOND
    <= from_iso8601_timestamp(:end)
  GROUP BY o.instance_id, o.began, o.hours, o.minutes
),
running AS (
  SELECT instance_id, date_diff('second', began, ended) AS seconds
  FROM sessions
  WHERE running = 1 AND ended IS NOT NULL
  UNION ALL
  SELECT instance_id, seconds
  FROM open_seconds
)
SELECT
  l.creator,
  l.instance_type,
  l.account,
  count(DISTINCT l.instance_id) AS instances,
  round(sum(r.seconds) / 3600.0, 3) AS instance_hours
FROM launches AS l
JOIN running AS r ON r.instance_id = l.instance_id
GROUP BY l.creator, l.instance_type, l.account
ORDER BY instance_hours DESC, l.creator, l.instance_type
