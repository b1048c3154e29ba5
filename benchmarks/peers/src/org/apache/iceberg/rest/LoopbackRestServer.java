package org.apache.iceberg.rest;

import java.util.HashMap;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.eclipse.jetty.compression.gzip.GzipCompression;
import org.eclipse.jetty.compression.server.CompressionHandler;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

/**
 * Apache Iceberg's reference REST catalog (the iceberg-open-api test fixture: a JDBC catalog
 * behind RESTCatalogServlet) on one address, for benchmarks on a shared machine: the stock
 * RESTCatalogServer listens on every interface. Arguments: HOST PORT; the catalog is
 * configured from the CATALOG_* environment as the stock server's is.
 */
public final class LoopbackRestServer {
  private LoopbackRestServer() {}

  public static void main(String[] args) throws Exception {
    Map<String, String> properties = new HashMap<>(RCKUtils.environmentCatalogConfig());
    properties.putIfAbsent(CatalogProperties.CATALOG_IMPL, JdbcCatalog.class.getName());
    properties.putIfAbsent("jdbc.schema-version", "V1");
    Catalog backend =
        CatalogUtil.buildIcebergCatalog("rest_backend", properties, new Configuration());
    RESTCatalogAdapter adapter =
        new RESTServerCatalogAdapter(new RESTCatalogServer.CatalogContext(backend, properties));

    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(new RESTCatalogServlet(adapter)), "/*");
    CompressionHandler compression = new CompressionHandler();
    compression.putCompression(new GzipCompression());
    context.insertHandler(compression);

    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost(args[0]);
    connector.setPort(Integer.parseInt(args[1]));
    server.addConnector(connector);
    server.setHandler(context);
    server.start();
    server.join();
  }
}
