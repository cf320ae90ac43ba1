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
    coalesce(lead(at) OVER (PARTITION BY instance_id ORDER BY at, eventid), from_iso8601_timestamp(:end)) AS ended
  FROM transitions
)
SELECT
  l.creator,
  l.instance_type,
  l.account,
  count(DISTINCT l.instance_id) AS instances,
  round(sum(date_diff('second', s.began, s.ended)) / 3600.0, 3) AS instance_hours
FROM launches AS l
JOIN sessions AS s ON s.instance_id = l.instance_id AND s.running = 1
GROUP BY l.creator, l.instance_type, l.account
ORDER BY instance_hours DESC, l.creator, l.instance_type
