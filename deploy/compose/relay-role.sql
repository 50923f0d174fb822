-- The relay role of sql/roles.sql for docker-compose.yml, idempotent:
-- run by the relay-role service after `cdc init` (which created the
-- tables granted on below), as the superuser "postgres", with
--   psql -v relay_password=... -f relay-role.sql
-- Keep it in step with sql/roles.sql (deploy/deploy_test.go checks that
-- it grants what that file grants).

SELECT 'CREATE ROLE walpost_relay WITH LOGIN REPLICATION'
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'walpost_relay')
\gexec
ALTER ROLE walpost_relay WITH LOGIN REPLICATION PASSWORD :'relay_password';

GRANT USAGE ON SCHEMA public TO walpost_relay;
GRANT SELECT ON public.outbox TO walpost_relay;
GRANT SELECT, INSERT, UPDATE ON public.walpost_sink_progress TO walpost_relay;
GRANT SELECT, INSERT ON public.walpost_dead_letter TO walpost_relay;
GRANT SELECT, INSERT, UPDATE ON public.walpost_coverage TO walpost_relay;
GRANT SELECT ON public.walpost_adopt TO walpost_relay;
