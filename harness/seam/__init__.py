"""The contract between the core and a backend plugin: the Backend base class and registry, the typed
values a backend hands the core (Device, Prepared), and the framework-free half of data-parallel runs."""
