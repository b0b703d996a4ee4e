"""DayOne's Airflow glue: operators, triggers, links, listeners that call into tasks/."""
