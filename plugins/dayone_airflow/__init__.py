"""DayOne's Airflow glue: operators, sensors/triggers, links, listeners that call into tasks/."""
